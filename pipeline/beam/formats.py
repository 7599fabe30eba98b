"""The output formats' table: `FORMATS[name]` = (build, summary) of its module of this package.

A format's module has `build(p, job, chunks, read_stats, workspace)` (its stages, from the read
stage's outputs to its manifest, returning the manifest's path) and `summary(config, seconds)`
(the manifest it wrote, the lines printed after the run). A new format is one such module, its row
here and its name in `--output_format`'s choices (pipeline/config/job.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pipeline.beam import megatron, tfrecord


class OutputFormat(NamedTuple):
    """What the job asks of an output format."""

    build: Callable[..., object]  # (p, job, chunks, read_stats, workspace): its stages, its manifest last
    summary: Callable[..., tuple[dict, str]]  # (config, seconds) -> (its manifest, the summary's lines)


FORMATS = {
    "tfrecord": OutputFormat(tfrecord.build, tfrecord.summary),
    "megatron": OutputFormat(megatron.build, megatron.summary),
}
