"""Wire the job into one Beam pipeline: the read stage, then the output format's stages, from `FORMATS`.

`build_pipeline(p, job)` is what tests and `run_job` call: `p | TokenShards(job=job)`, the job's
public PTransform (pipeline/beam/transform.py), which reads the inputs and builds the format's stages.
An output format is a module of this package with `build(p, job, chunks, read_stats, workspace)`
(its stages, from the read stage's outputs to its manifest, returning the manifest's path) and
`summary(config, seconds)` (the manifest it wrote, the lines printed after the run):
pipeline/beam/tfrecord.py, pipeline/beam/megatron.py. A new format is one such module, its row
here and its name in `--output_format`'s choices (pipeline/config/job.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import apache_beam as beam

from pipeline.beam import megatron, tfrecord
from pipeline.beam.execution import Workspace
from pipeline.beam.preflight import Job
from pipeline.beam.transform import TokenShards


class OutputFormat(NamedTuple):
    """What the job asks of an output format."""

    build: Callable[..., None]  # (p, job, chunks, read_stats, workspace): its stages, its manifest last
    summary: Callable[..., tuple[dict, str]]  # (config, seconds) -> (its manifest, the summary's lines)


FORMATS = {
    "tfrecord": OutputFormat(tfrecord.build, tfrecord.summary),
    "megatron": OutputFormat(megatron.build, megatron.summary),
}


def build_pipeline(p: beam.Pipeline, job: Job, workspace: Workspace | None = None) -> None:
    """Add the whole job to `p`: read (and fan out) -> the output format's stages -> its manifest.

    `workspace`: what the run made for its workers (none: no spill files, no progress lines).
    """
    _ = p | "TokenShards" >> TokenShards(job=job, workspace=workspace or Workspace())
