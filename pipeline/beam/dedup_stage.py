"""`--dedup` / `--decontaminate` in the job: the read chunks' documents through Dedup, removals joined back to chunks.

Element shapes:
  Chunk                                  -> DocumentsOfFn -> ((file_index, line), {"text", "subset", "chunk"})
  documents                              -> Dedup (pipeline/beam/dedup.py) -> removed records
  removed record                         -> ((file_index, chunk), record), CoGroupByKey with
  Chunk keyed by (file_index, chunk)     -> (Chunk, {line: record}): what the formats tokenize
    (with a spill directory, DirectRunner: a SpilledChunk, the chunk's lines written once to a local
    spill file as it is read, so that the join moves references, not the text: pipeline/io/spill.py)
  removed record                         -> ((file_index, first chunk), record) -> WriteRemovedFn -> file info
The formats' tokenizing stage (pipeline/beam/chunk_documents.py) skips the removed lines, counts them
per subset by reason with their tokens, and tokenizes a `contaminated_cut` document's cut text. The
removed/ files' infos reach the manifest through the job's stats (`{"removed_files": {path: info}}`).
Dedup runs on the documents as read, so before epochs: an epoch copy is never a duplicate.
"""

from __future__ import annotations

import dataclasses
import posixpath

import apache_beam as beam

from pipeline.beam.chunk_documents import DEAD_LETTER_SPAN
from pipeline.beam.dedup import REMOVED, Dedup
from pipeline.beam.execution import Workspace
from pipeline.beam.graph import EVERY_FEATURE, Runtime
from pipeline.beam.preflight import Job
from pipeline.beam.read import Unread, chunk_stage
from pipeline.config.job import PipelineConfig
from pipeline.core import documents
from pipeline.io import inputs, outputs
from pipeline.io.publish import publish
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.urls import redact_url

REMOVED_FILES = "removed_files"  # the stats key of the removed/ files' infos


class DocumentsOfFn(beam.DoFn):
    """Chunk -> each valid, selected document: ((file_index, line), {"text", "subset", "chunk"})."""

    def __init__(self, config: PipelineConfig):
        self._config = config
        self._selected = config.selection()

    def process(self, chunk: inputs.Chunk):
        cfg = self._config
        stats = documents.file_stats()  # the tokenizing stage counts them; these are thrown away
        for line in chunk.lines:
            try:
                doc = documents.validate(line, cfg.max_line_bytes, cfg.schema, stats)
            except documents.BadRecord:
                continue  # a dead letter of the tokenizing stage
            if documents.filter_reason(doc.text, doc.subset, self._selected):
                continue
            yield (chunk.file_index, line.number), {"text": doc.text, "subset": doc.subset, "chunk": chunk.chunk_index}


class SpillChunksFn(beam.DoFn):
    """Chunk -> ((file_index, chunk_index), what the sink gives for it: the chunk, or a SpilledChunk)."""

    def __init__(self, sink: RecordSink):
        self._sink = sink

    def process(self, chunk: inputs.Chunk):
        yield (chunk.file_index, chunk.chunk_index), self._sink.put_chunk(chunk)

    def teardown(self):
        self._sink.close()


def _key_chunk(chunk: inputs.Chunk):
    return (chunk.file_index, chunk.chunk_index), chunk


def _units_with_removed(element):
    """(slot, {"units": [work items], "removed": [record]}) -> (slot, work items, {(file, chunk): {line: record}})."""
    slot, parts = element
    removed: dict = {}
    for r in parts["removed"]:
        removed.setdefault((r["file_index"], r["chunk"]), {})[r["line"]] = r
    for units in parts["units"]:  # one per slot
        yield slot, units, removed


def _with_removed(element):
    _, parts = element
    for chunk in parts["chunk"]:  # one chunk per key
        yield chunk, {r["line"]: r for r in parts["removed"]}


class WriteRemovedFn(beam.DoFn):
    """((file_index, first chunk), [record]) -> info of one run-<id>/removed/ file, lines sorted by (file, line)."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element):
        (file_index, first_chunk), records = element
        lines = outputs.dead_letter_lines(list(records))
        name = outputs.run_path(self._run_id, outputs.removed_name(self._config.split, file_index, first_chunk))
        size, sha = publish(posixpath.join(self._config.output_dir, name), lines)
        yield {REMOVED_FILES: {name: {"path": name, "records": len(lines), "bytes": size, "sha256": sha}}}


def bucket_partitions(input_bytes: int) -> int:
    """The bucket keys' partitions for an input of `input_bytes` stored: one per 256 MB, 16 to 65,536.

    A document puts ~136 bytes of bucket pairs in them (its exact key and 7 bands) per ~4-9 KB
    line: the Pile (420 GB of zstd, 210 M documents) gives ~1,600 partitions of ~17 MB.
    """
    return max(16, min(1 << 16, input_bytes >> 28))


def dedup_transform(job: Job, runtime: Runtime = EVERY_FEATURE) -> Dedup:
    """The Dedup PTransform of the job's flags."""
    cfg = job.config
    return Dedup(
        exact=cfg.dedup in ("exact", "near"), near=cfg.dedup == "near", normalization=cfg.dedup_normalization,
        ngram=cfg.minhash_ngram, num_perm=cfg.minhash_num_perm, bands=cfg.minhash_bands, rows=cfg.minhash_rows,
        seed=cfg.minhash_seed, jaccard_threshold=cfg.dedup_verify_jaccard, rounds=cfg.dedup_rounds,
        partitions=bucket_partitions(job.execution.input_bytes),
        eval_files=list(job.eval_files), eval_text_key=cfg.decontam_text_key, eval_ngram=cfg.decontam_ngram,
        cut=cfg.decontam_cut, max_eval_ngrams=cfg.decontam_max_ngrams,
        file_names=[redact_url(path) for path in job.input_files], keep_text=False, removed_only=True,
        runtime=runtime)


def apply_dedup(job: Job, chunks, read_stats, workspace: Workspace | None = None):
    """(chunks, read stats) -> ((Chunk, {line: removed record}), read stats + the removed/ files' infos).

    With the workspace's spill directory the Chunk is a SpilledChunk (the tokenizing stage loads it).
    """
    cfg = job.config
    runtime = workspace.runtime if workspace is not None else EVERY_FEATURE
    documents = chunk_stage(chunks, "DocumentsOf", DocumentsOfFn(cfg), main="docs", runtime=runtime).docs
    removed = (documents | "Dedup" >> dedup_transform(job, runtime))[REMOVED]
    files = (removed
             | "KeyRemovedFiles" >> beam.Map(
                 lambda r: ((r["file_index"], r["chunk"] - r["chunk"] % DEAD_LETTER_SPAN), r))
             | "GroupRemoved" >> beam.GroupByKey()
             | "WriteRemoved" >> beam.ParDo(WriteRemovedFn(cfg, job.run_id)))
    stats = files if read_stats is None else (read_stats, files) | "WithRemovedFiles" >> beam.Flatten()
    if isinstance(chunks, Unread):
        # The chunks are read again by the tokenizing step's tasks: each task gets the removed
        # records of the files it reads, and no text waits in a join.
        slots = chunks.slots_of_file
        by_slot = removed | "RemovedBySlot" >> beam.FlatMap(lambda r: [(s, r) for s in slots[r["file_index"]]])
        joined = ({"units": chunks.items, "removed": by_slot}
                  | "JoinRemoved" >> beam.CoGroupByKey()
                  | "WithRemoved" >> beam.FlatMap(_units_with_removed))
        return dataclasses.replace(chunks, items=joined), stats
    sink = workspace.sink if workspace is not None else KEEP
    # ((file_index, chunk_index), Chunk or SpilledChunk)
    keyed = chunks | "KeyChunks" >> (beam.ParDo(SpillChunksFn(sink)) if sink is not KEEP else beam.Map(_key_chunk))
    joined = ({"chunk": keyed,
               "removed": removed | "KeyRemoved" >> beam.Map(lambda r: ((r["file_index"], r["chunk"]), r))}
              | "JoinRemoved" >> beam.CoGroupByKey()
              | "WithRemoved" >> beam.FlatMap(_with_removed))
    return joined, stats
