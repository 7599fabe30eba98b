"""Dedup and decontamination on Beam's shuffle: the Dedup PTransform and its steps, and dedup in the job.

transform.py holds the composite, `Dedup` (its docstring: the stages in order, elements, memory);
its steps are decontaminate.py, sign.py (exact dedup), near.py and records.py (what it emits).
In the token-shard job, stage.py feeds it the policy's documents a chunk at a time (chunks.py) and
joins its removed records back to the chunks. The algorithms are pure functions in pipeline/core/.
"""
