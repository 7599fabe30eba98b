"""The output formats' table: `FORMATS[name]` = (build, summary, prepare) of its module of this package.

A format's module has `build(p, job, chunks, read_stats, workspace)` (its stages, from the read
stage's outputs to its manifest, returning the manifest's path) and `summary(config, seconds)`
(the manifest it wrote, the lines printed after the run); `prepare(config)` checks and prepares
the output directory (by default: one output, pipeline/io/outputs.py), returning the `Removal` of
a replaced output's files still under way, if any. A new format is one such
module, its row here and its name in `--output_format`'s choices (pipeline/config/job.py).
`output_format(config)` is the one place that picks the row for a config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pipeline.beam import megatron, per_subset, tfrecord
from pipeline.config.job import PipelineConfig
from pipeline.io.outputs import Removal, prepare_output_dir


def _prepare_one_output(config: PipelineConfig) -> Removal | None:
    return prepare_output_dir(config.output_dir, config.overwrite, background=True, resume=config.resume)


class OutputFormat(NamedTuple):
    """What the job asks of an output format."""

    build: Callable[..., object]  # (p, job, chunks, read_stats, workspace): its stages, its manifest last
    summary: Callable[..., tuple[dict, str]]  # (config, seconds) -> (its manifest, the summary's lines)
    prepare: Callable[[PipelineConfig], Removal | None] = _prepare_one_output  # the output directory, before the run


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
