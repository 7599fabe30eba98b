"""Wire the job into one Beam pipeline: the read stage, then the output format's stages, from `FORMATS`.

`build_pipeline(p, job)` is what tests and `run_job` call. An output format is a module of this
package with `build(p, job, chunks, read_stats, workspace)` (its stages, from the read stage's
outputs to its manifest) and `summary(config, seconds)` (the manifest it wrote, the lines printed
after the run): pipeline/beam/tfrecord.py, pipeline/beam/megatron.py. A new format is one such
module, its row here and its name in `--output_format`'s choices (pipeline/config/job.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import apache_beam as beam

from pipeline.beam import megatron, per_subset, tfrecord
from pipeline.beam.dedup_stage import apply_dedup
from pipeline.beam.execution import Workspace
from pipeline.beam.preflight import Job
from pipeline.beam.read import read_chunks
from pipeline.config.job import PipelineConfig
from pipeline.io.outputs import prepare_output_dir


class OutputFormat(NamedTuple):
    """What the job asks of an output format."""

    build: Callable[..., None]  # (p, job, chunks, read_stats, workspace): its stages, its manifest last
    summary: Callable[..., tuple[dict, str]]  # (config, seconds) -> (its manifest, the summary's lines)
    prepare: Callable[[PipelineConfig], None] = lambda config: prepare_output_dir(config.output_dir, config.overwrite)


FORMATS = {
    "tfrecord": OutputFormat(tfrecord.build, tfrecord.summary),
    "megatron": OutputFormat(megatron.build, megatron.summary),
}

# TFRecord outputs, one per subset, and their mixture.json (--per_subset).
PER_SUBSET = OutputFormat(per_subset.build, per_subset.summary, per_subset.prepare)


def output_format(config: PipelineConfig) -> OutputFormat:
    """The stages, summary and output-directory check of the config's output."""
    if config.per_subset and config.output_format == "tfrecord":
        return PER_SUBSET
    return FORMATS[config.output_format]


def build_pipeline(p: beam.Pipeline, job: Job, workspace: Workspace | None = None) -> None:
    """Add the whole job to `p`: read (and fan out) -> [dedup] -> the output format's stages -> its manifest.

    `workspace`: what the run made for its workers (none: no spill files, no progress lines).
    """
    workspace = workspace or Workspace()
    chunks, read_stats = read_chunks(p, job, workspace)
    if job.config.dedup_enabled:  # before tokenizing and epochs (pipeline/beam/dedup_stage.py)
        chunks, read_stats = apply_dedup(job, chunks, read_stats)
    output_format(job.config).build(p, job, chunks, read_stats, workspace)
