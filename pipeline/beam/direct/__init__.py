"""DirectRunner's machinery: the runner object, workers' work items and claims, spill files; never the job's graph.

The job's graph (pipeline/beam/) runs on every runner; what one machine needs to run it fast is
here, handed to the graph by `run_job` (pipeline/beam/launch.py) through the run's Workspace: its
reader of work items (read.py), its sink (spill.py). No module of the graph imports this package
(tests/test_layers.py).
"""
