"""run-<id>/removed/: every document a stage, dedup or decontamination left out (or cut), one writer for all.

Element shapes:
  Chunk -> the tokenizing stage (pipeline/beam/chunk_documents.py) -> REMOVED: ((file_index, first chunk), [record])
  ((file_index, first chunk), [[record]]) -> WriteRemovedFn -> JobStats(removed_files={path: file info})

The records of SPAN consecutive chunks of an input file share one file,
`removed/<split>-<file>-<first chunk>.jsonl`, its lines sorted by (file_index, line): the same bytes
on any runner and any number of workers. Every record comes from the tokenizing stage (the
stages' own, and dedup's as pipeline/beam/dedup/transform.py made them), so no two writers ever write one
name. The files' infos reach the manifest through the job's stats (`JobStats.removed_files`).
"""

from __future__ import annotations

import posixpath

import apache_beam as beam

from pipeline.config.job import PipelineConfig
from pipeline.core.stats import JobStats
from pipeline.io import outputs
from pipeline.io.publish import publish

REMOVED = "removed"  # the tokenizing stage's output of removal and cut records
SPAN = 64  # consecutive chunks of a file whose records share a file (as dead letters do)


def removed_part(chunk, records: list[dict]):
    """A chunk's records (`chunk`: a Chunk or its ChunkResult) as one REMOVED element, keyed by its file and span."""
    return (chunk.file_index, chunk.chunk_index - chunk.chunk_index % SPAN), records


class WriteRemovedFn(beam.DoFn):
    """((file_index, first chunk), [[record]]) -> JobStats of one removed/ file's info, lines sorted by (file, line)."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element):
        (file_index, first_chunk), parts = element
        lines = outputs.dead_letter_lines([record for part in parts for record in part])
        name = outputs.run_path(self._run_id, outputs.removed_name(self._config.split, file_index, first_chunk))
        size, sha = publish(posixpath.join(self._config.output_dir, name), lines)
        yield JobStats(removed_files={name: {"path": name, "records": len(lines), "bytes": size, "sha256": sha}})


class WriteRemoved(beam.PTransform):
    """The REMOVED output -> JobStats(removed_files={path: info}) per removed/ file, for the job's stats."""

    def __init__(self, config: PipelineConfig, run_id: str):
        super().__init__()
        self._config = config
        self._run_id = run_id

    def expand(self, parts):
        return (
            parts
            | "GroupRemoved" >> beam.GroupByKey()  # ((file_index, first chunk), [[record]])
            | "WriteRemoved" >> beam.ParDo(WriteRemovedFn(self._config, self._run_id))
        )


def removed_files(config: PipelineConfig, run_id: str, tokenized) -> tuple:
    """The removed/ files' infos from a tokenizing stage's outputs: PCollections to flatten into the job's stats.

    Empty when the job lists nothing (no step is added to a default job).
    """
    if not config.lists_removed:
        return ()
    return (tokenized[REMOVED] | "WriteRemovedFiles" >> WriteRemoved(config, run_id),)
