"""Beam's DaskRunner on a dask.distributed cluster: the profile (profile.py) and its room."""
