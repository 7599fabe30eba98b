"""DirectRunner's profile (profile.py) and its room: the runner object, work items and claims, spill files.

What one machine needs to run the job fast is here, handed to the graph through the run's
Workspace: its reader of work items (read.py), its sink (spill.py). No module outside
pipeline/beam/runners/ imports this package (tests/test_runner_profiles.py).
"""
