"""`--dedup` / `--decontaminate` in the job: the read chunks' documents through Dedup, removals joined back to chunks.

Element shapes:
  Chunk                                  -> SignDocumentsFn (pipeline/beam/dedup/chunks.py) -> signed documents
                                            + decontamination's removed records
                                            + with stages: ((file_index, chunk), {line: Verdict}) on VERDICTS
  signed documents                       -> Dedup's groups (pipeline/beam/dedup/transform.py `Dedup.group`)
                                            -> removed records
  removed record                         -> ((file_index, chunk), record), CoGroupByKey with
  Chunk keyed by (file_index, chunk)     -> (Chunk, {line: record}[, {line: Verdict}]): what the formats tokenize
    (with a spill directory, DirectRunner: a SpilledChunk, the chunk's lines written once to a local
    spill file as it is read, so that the join moves references, not the text: pipeline/beam/runners/direct/spill.py)
SignDocumentsFn applies the document policy (pipeline/process/dedup_input.py) with its stages, so dedup
sees the text the stages left and never a document they removed; the stages run only there, and
their verdicts travel with the chunk. It decontaminates and signs each chunk's documents at once,
and commits them per chunk in a resumable run (a run that takes it up does neither again for a
committed chunk); then Dedup's exact and near groups. The formats' tokenizing stage (pipeline/process/engine.py)
replays them, skips the removed lines, counts them per subset by reason with their tokens,
tokenizes a `contaminated_cut` document's cut text, and emits every record to the removed/ writer
(pipeline/beam/removed.py). Dedup runs on the documents as read, so before epochs: an epoch copy is
never a duplicate.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipeline.beam.dedup.chunks import VERDICTS, SignDocumentsFn
from pipeline.beam.dedup.sign import SHINGLES
from pipeline.beam.dedup.transform import REMOVED, Dedup
from pipeline.beam.execution import Workspace
from pipeline.beam.graph import EVERY_FEATURE, Runtime
from pipeline.beam.preflight import Job
from pipeline.beam.read import Unread, chunk_stage
from pipeline.io import inputs
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.urls import redact_url
from pipeline.process.commit import Committed


class SpillChunksFn(beam.DoFn):
    """Chunk -> ((file_index, chunk_index), what the sink gives for it: the chunk, or a SpilledChunk)."""

    def __init__(self, sink: RecordSink):
        self._sink = sink

    def process(self, chunk: inputs.Chunk | Committed):
        # A Committed marker (a chunk a run before finished) has no lines to spill.
        yield (chunk.file_index, chunk.chunk_index), chunk if isinstance(chunk, Committed) else self._sink.put_chunk(
            chunk)

    def teardown(self):
        self._sink.close()


def _key_chunk(chunk: inputs.Chunk):
    return (chunk.file_index, chunk.chunk_index), chunk


def _units_with_removed(element):
    """(slot, {"units", "removed"[, "verdicts"]}) -> (slot, work items, removed, verdicts) by (file, chunk), then line.

    `verdicts` is None without stages.
    """
    slot, parts = element
    removed: dict = {}
    for r in parts["removed"]:
        removed.setdefault((r["file_index"], r["chunk"]), {})[r["line"]] = r
    verdicts = dict(parts["verdicts"]) if "verdicts" in parts else None
    for units in parts["units"]:  # one per slot
        yield slot, units, removed, verdicts


def _with_removed(element):
    _, parts = element
    removed = {r["line"]: r for r in parts["removed"]}
    for chunk in parts["chunk"]:  # one chunk per key
        if "verdicts" in parts:  # one {line: Verdict} per chunk
            yield chunk, removed, {line: v for verdicts in parts["verdicts"] for line, v in verdicts.items()}
        else:
            yield chunk, removed


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
    """(chunks, read stats) -> ((Chunk, {line: removed record}[, {line: Verdict}]), read stats).

    With the workspace's spill directory the Chunk is a SpilledChunk (the tokenizing stage loads it).
    The removed records are written to removed/ by the tokenizing stage (pipeline/beam/removed.py).
    With a work folder (a resumable run) each chunk's dedup input is committed before the groups.
    """
    cfg = job.config
    runtime = workspace.runtime if workspace is not None else EVERY_FEATURE
    deduper = dedup_transform(job, runtime)
    work = workspace.work if workspace is not None else None
    documents = chunk_stage(chunks, "SignDocuments", SignDocumentsFn(cfg, deduper, work), SHINGLES, REMOVED,
                            VERDICTS, main="signed", runtime=runtime)
    removed = [documents[REMOVED]]
    if deduper.exact or deduper.near:
        _, grouped = deduper.group(documents.signed, documents[SHINGLES])
        removed += grouped
    removed = removed | "Removed" >> beam.Flatten()
    if isinstance(chunks, Unread):
        # The chunks are read again by the tokenizing step's tasks: each task gets the removed
        # records (and the stages' verdicts) of the files it reads, and no text waits in a join.
        slots = chunks.slots_of_file
        parts = {"units": chunks.items,
                 "removed": removed | "RemovedBySlot" >> beam.FlatMap(
                     lambda r: [(s, r) for s in slots[r["file_index"]]])}
        if cfg.stage_names():
            parts["verdicts"] = documents[VERDICTS] | "VerdictsBySlot" >> beam.FlatMap(
                lambda kv: [(s, kv) for s in slots[kv[0][0]]])
        joined = parts | "JoinRemoved" >> beam.CoGroupByKey() | "WithRemoved" >> beam.FlatMap(_units_with_removed)
        return dataclasses.replace(chunks, items=joined), read_stats
    sink = workspace.sink if workspace is not None else KEEP
    # ((file_index, chunk_index), Chunk or SpilledChunk or Committed)
    keyed = chunks | "KeyChunks" >> (beam.ParDo(SpillChunksFn(sink)) if sink is not KEEP else beam.Map(_key_chunk))
    parts = {"chunk": keyed,
             "removed": removed | "KeyRemoved" >> beam.Map(lambda r: ((r["file_index"], r["chunk"]), r))}
    if cfg.stage_names():
        parts["verdicts"] = documents[VERDICTS]
    joined = parts | "JoinRemoved" >> beam.CoGroupByKey() | "WithRemoved" >> beam.FlatMap(_with_removed)
    return joined, read_stats
