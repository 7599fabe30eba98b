"""The start-up tricks of a command's process on one machine, entered through `pipeline/startup/command.py`."""
