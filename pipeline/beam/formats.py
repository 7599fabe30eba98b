"""The output formats' table: `FORMATS[name]` = (build, summary, prepare, parts) of its module of this package.

A format's module has `build(p, job, chunks, read_stats, workspace)` (its stages, from the read
stage's outputs to its manifest, returning the manifest's path) and `summary(config, seconds)`
(the manifest it wrote, the lines printed after the run); `prepare(config)` checks and prepares
the output directory (by default: one output, pipeline/io/outputs.py), returning the `Removal` of
a replaced output's files still under way, if any; `parts(config)` names the outputs of its own
inside the output directory (a subset's, a bucket's), each with a run directory of the run, which
a stopped run removes with its own (`remove_stopped`). A new format is one such module, its row
here and its name in `--output_format`'s choices (pipeline/config/output.py).
`output_format(config)` is the one place that picks the row for a config.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import NamedTuple

import fsspec

from pipeline.beam import jsonl, megatron
from pipeline.beam.mixture import per_subset, split_by
from pipeline.beam.tfrecord import output as tfrecord
from pipeline.config.job import PipelineConfig
from pipeline.io.outputs import Removal, prepare_output_dir, remove_unfinished_run
from pipeline.io.urls import is_local


def _prepare_one_output(config: PipelineConfig) -> Removal | None:
    return prepare_output_dir(config.output_dir, config.overwrite, background=True, resume=config.resume)


def _one_output(config: PipelineConfig) -> list[str]:
    return []


class OutputFormat(NamedTuple):
    """What the job asks of an output format."""

    build: Callable[..., object]  # (p, job, chunks, read_stats, workspace): its stages, its manifest last
    summary: Callable[..., tuple[dict, str]]  # (config, seconds) -> (its manifest, the summary's lines)
    prepare: Callable[[PipelineConfig], Removal | None] = _prepare_one_output  # the output directory, before the run
    parts: Callable[[PipelineConfig], list[str]] = _one_output  # its outputs inside OUT (directory names)

    def remove_stopped(self, config: PipelineConfig, run_id: str) -> list[str]:
        """Remove what a stopped run wrote; the files removed, relative to OUT.

        That is OUT's run directory and each part's, unless committed (a committed part is a complete
        output), and the parts' directories it left empty.
        """
        out = config.output_dir.rstrip("/")
        removed = remove_unfinished_run(out, run_id)
        fs, root = fsspec.core.url_to_fs(out)
        for part in self.parts(config):
            removed += [f"{part}/{rel}" for rel in remove_unfinished_run(posixpath.join(out, part), run_id)]
            folder = posixpath.join(root, part)
            try:
                if is_local(fs) and fs.isdir(folder) and not fs.ls(folder, detail=False):
                    fs.rmdir(folder)
            except OSError:
                pass  # something else is (or was) there: not ours to insist on
        return removed


FORMATS = {
    "tfrecord": OutputFormat(tfrecord.build, tfrecord.summary),
    "megatron": OutputFormat(megatron.build, megatron.summary),
    "jsonl": OutputFormat(jsonl.build, jsonl.summary),
}
# TFRecord outputs, one per subset, and their mixture.json (--per_subset).
PER_SUBSET = OutputFormat(per_subset.build, per_subset.summary, per_subset.prepare, per_subset.parts)
# TFRecord outputs, one per bucket of a stage's label, buckets.json and mixture.json (--split_by).
SPLIT_BY = OutputFormat(split_by.build, split_by.summary, split_by.prepare, split_by.parts)


def output_format(config: PipelineConfig) -> OutputFormat:
    """The stages, summary and output-directory check of the config's output."""
    if config.split_by:
        return SPLIT_BY
    if config.per_subset and config.output_format == "tfrecord":
        return PER_SUBSET
    return FORMATS[config.output_format]
