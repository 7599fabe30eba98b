"""Runner profiles: everything the job knows of a runner, one module per runner family.

A profile (base.py `RunnerProfile`) plans the execution, makes what the workers are handed (the
record sink, the work-item reader), declares what the runner supports (a `Runtime`), turns the
runner's own failures into one line and warms up what its workers will need. The registry
(registry.py) maps --runner values to profiles; no module outside this folder compares runner
names (tests/test_runner_profiles.py). Families: direct/ (DirectRunner, one machine), dask/ (Beam's
DaskRunner), distributed.py (Dataflow, Flink, Spark, the portable runners); work_items.py is
shared by the two whose workers read their own work items.
"""
