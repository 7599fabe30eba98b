"""Wire the job into one Beam pipeline: `p | TokenShards(job=job)`, the read stage, then the output format's.

`build_pipeline(p, job)` is what tests and `run_job` call; the job's public PTransform
(pipeline/beam/transform.py) reads the inputs, removes duplicates when asked
(pipeline/beam/dedup/stage.py) and adds the stages of the format's module, from `FORMATS`
(pipeline/beam/formats.py: pipeline/beam/tfrecord/output.py, pipeline/beam/megatron.py,
pipeline/beam/mixture/per_subset.py).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.beam.execution import Workspace
from pipeline.beam.formats import FORMATS, PER_SUBSET, SPLIT_BY, OutputFormat, output_format
from pipeline.beam.preflight import Job
from pipeline.beam.transform import TokenShards

__all__ = ["FORMATS", "PER_SUBSET", "SPLIT_BY", "OutputFormat", "build_pipeline", "output_format"]


def build_pipeline(p: beam.Pipeline, job: Job, workspace: Workspace | None = None) -> None:
    """Add the whole job to `p`: read (and fan out) -> [dedup] -> the output format's stages -> its manifest.

    `workspace`: what the run made for its workers (none: no spill files, no progress lines).
    """
    _ = p | "TokenShards" >> TokenShards(job=job, workspace=workspace or Workspace())
