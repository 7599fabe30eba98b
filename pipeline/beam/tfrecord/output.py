"""`--output_format tfrecord` (the default): documents packed into fixed-length records, shuffled into shards.

Element shapes:
  Chunk                                    -> ProcessChunkFn    -> (source_id, Records)
                                                                 + tails ((copy, file), (chunk, Piece))
                                                                 + dead letters, stats, counts (source_id, n)
  ((copy, file), [(chunk, Piece)])         -> PackTailsFn       -> (source_id, Records) + Piece
  (None, [((copy, file), Piece)])          -> PackFinalFn       -> (source_id, Records) + stats
  JobStats + (source_id, n)                -> TotalsFn          -> (stats, counts) -> offsets -> ShardPlan
  (source_id, Records) + offsets + plan    -> AssignShardsFn    -> (shard, (placement, Records))
  (shard, [(placement, Records)]) + plan   -> WriteShardFn      -> shard info dict
  (file or -1, [(source_id, n, spans)])    -> WriteProvenanceFn -> provenance file info dict
With --packing best_fit, ProcessChunkFn packs each chunk's documents whole (pipeline/core/best_fit.py)
and emits no tails: PackTails and PackFinal are not in the job.
source_id = (kind, copy, file_index, chunk_index): kind 0 chunk records, 1 per-file tails, 2 final.
placement: the permuted global positions of those records in that shard, as little-endian int64 bytes,
or with one shard the global index of the block's first record (the writer permutes them all at once).
With --provenance, the three packing DoFns also emit (source_id, records, spans) on PROVENANCE: where
the labels of that block of records come from (pipeline/core/provenance.py).
The packing DoFns are pipeline/beam/tfrecord/pack.py's; the totals, the shard plan, the assignment
and the writers pipeline/beam/tfrecord/shards.py's; this module builds the graph and the manifest.
Records: a block of TFRecord-framed records, one element for many records: a FramedRecords
(pipeline/format/framing.py) or, through a sink that stores them, a SpilledRecords reference to the
same bytes in a file (pipeline/io/record_files.py). Reading and the chunks' documents are every
format's (pipeline/beam/read.py, pipeline/beam/chunk_documents.py).
"""

from __future__ import annotations

import logging
import posixpath

import apache_beam as beam
import numpy as np

from pipeline.beam.chunk_documents import COUNTS, DEAD_LETTERS, WriteDeadLetters
from pipeline.beam.execution import Workspace
from pipeline.beam.graph import gather, join_each, multi_output, outputs_of
from pipeline.beam.manifest import shared_entries, tokenizer_json
from pipeline.beam.preflight import Job
from pipeline.beam.read import STATS, chunk_stage, reporter
from pipeline.beam.removed import REMOVED, removed_files
from pipeline.beam.tfrecord.pack import PROVENANCE, TAILS, PackFinalFn, PackTailsFn, ProcessChunkFn
from pipeline.beam.tfrecord.shards import (
    AssignJoinedFn,
    AssignShardsFn,
    TotalsFn,
    WriteJoinedShardFn,
    WriteShardFn,
    placed_sources,
    summary_and_plan,
    totals_offsets,
)
from pipeline.config.job import PipelineConfig
from pipeline.core.stats import JobStats, sorted_dict
from pipeline.format import framing, records
from pipeline.format import manifest as manifest_lib
from pipeline.format import provenance as provenance_files
from pipeline.format.summary import format_summary
from pipeline.io import outputs
from pipeline.io.outputs import commit_output
from pipeline.io.publish import publish
from pipeline.io.urls import redact_url
from pipeline.process.tfrecord import packs_best_fit

LOG = logging.getLogger(__name__)


def token_dtype(job: Job) -> np.dtype:
    """Token dtype of the records."""
    return records.token_dtype_for(job.tokenizer.special.vocab_size)


def record_bytes(job: Job) -> int:
    """Framed size of every full record (they all have the same size)."""
    return framing.record_bytes(job.config.seq_len, token_dtype(job), job.config.document_boundaries)


class WriteProvenanceFn(beam.DoFn):
    """(file_index or -1, [(source_id, records, spans)]) -> info of run-<id>/provenance/<split>-<file|final>.npz."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element):
        file_index, blocks = element
        name = outputs.run_path(self._run_id, provenance_files.file_name(
            self._config.split, None if file_index < 0 else file_index))
        size, sha = publish(posixpath.join(self._config.output_dir, name), [provenance_files.encode(list(blocks))])
        yield {"path": name, "bytes": size, "sha256": sha}


def build_manifest(job: Job, shards: list[dict], stats: JobStats, dead_letters: list[dict], num_shards: int,
                   provenance: list[dict] | None = None) -> dict:
    """The manifest's content (pure, so tests can check it without Beam)."""
    cfg = job.config
    shards = sorted(shards, key=lambda s: s["path"])
    packing_stats = stats.manifest_packing()
    num_records = sum(s["records"] for s in shards)
    manifest = shared_entries(cfg, job.run_id, stats, dead_letters, job.resumes)
    manifest["totals"].update(
        records=num_records,
        label_tokens=num_records * cfg.seq_len - packing_stats.get("padding_labels", 0),
        bytes=sum(s["bytes"] for s in shards),
    )
    mode = records.BEST_FIT if packs_best_fit(cfg) else records.CONCAT
    # Only for best_fit, so that a concat manifest stays the same bytes.
    layout = {"mode": mode, "window": cfg.packing_window} if mode == records.BEST_FIT else {}
    manifest.update({
        "format": manifest_lib.FORMAT,
        "format_version": manifest_lib.FORMAT_VERSION,
        "seq_len": cfg.seq_len,
        "features": records.feature_spec(cfg.seq_len, token_dtype(job), cfg.document_boundaries, mode),
        "tokenizer": tokenizer_json(job),
        "shards": shards,
        "packing": {
            "remainder_policy": cfg.remainder,
            "records_from_chunks": num_records
            - packing_stats.get("records_from_tails", 0)
            - packing_stats.get("padded_records", 0),
            **packing_stats,
            **layout,
        },
        "shuffle": {"method": "feistel permutation of global record index", "seed": cfg.seed,
                    "num_shards": num_shards},
        "config": cfg.to_json(),
        # Only with --provenance, so that the default output stays the same bytes.
        **({"provenance": {"files": sorted(provenance, key=lambda f: f["path"])}} if cfg.provenance else {}),
    })
    return sorted_dict(manifest)


def build(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace) -> beam.PCollection:
    """Add the TFRecord writer to `p`: chunks -> tokenize/pack -> shuffle into shards -> manifest.

    `chunks` and `read_stats` are the read stage's outputs (pipeline/beam/read.py). Returns the
    manifest's path (one element, once it is written).
    """
    return build_output(p, job, chunks, read_stats, workspace)


def build_output(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace, skip_empty: bool = False):
    """`build`; with `skip_empty`, no records is no manifest and "" (a subset of a --per_subset job)."""
    cfg, sink, runtime = job.config, workspace.sink, workspace.runtime
    processed = chunk_stage(
        chunks, "TokenizeAndPack",
        ProcessChunkFn(cfg, job.tokenizer, job.execution.encode_threads, sink, reporter(job, workspace),
                       encode_batch_bytes=job.execution.encode_batch_bytes, work=workspace.work),
        TAILS, DEAD_LETTERS, STATS, COUNTS, PROVENANCE, REMOVED, main="records", runtime=runtime)
    if packs_best_fit(cfg):  # every chunk packed whole: no tails to join
        stages = [processed]
    else:
        file_tails = multi_output(
            processed[TAILS] | "GroupTailsByFile" >> beam.GroupByKey(),  # ((copy, file), [(chunk, Piece)])
            "PackTails", PackTailsFn(cfg, job.tokenizer.special, sink), TAILS, STATS, COUNTS, PROVENANCE,
            main="records", runtime=runtime)
        final = multi_output(
            file_tails[TAILS] | "GroupLastTails" >> beam.GroupByKey(),  # (None, [((copy, file), Piece)]): one group
            "PackFinal", PackFinalFn(cfg, job.tokenizer.special, sink), STATS, COUNTS, PROVENANCE, main="records",
            runtime=runtime)
        stages = [processed, file_tails, final]
    all_records = tuple(stage.records for stage in stages) | "AllRecords" >> beam.Flatten()
    # One global combine for the stats and the record counts (every step of a DirectRunner job runs
    # after the other). Record counts come from the producers themselves: counting `all_records`
    # would be one more pass of every record through the driver on DirectRunner. Never empty (every
    # work item read reports its file's stats), so no default value is needed.
    counted = [pc for stage in stages for pc in outputs_of(stage, STATS, COUNTS)]
    totals = (
        tuple(pc for pc in (read_stats, *counted, *removed_files(cfg, job.run_id, processed)) if pc is not None)
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(TotalsFn()).without_defaults()
    )
    # (stats, shard plan): what the manifest needs of the totals.
    summary = totals | "PlanShards" >> beam.Map(summary_and_plan, cfg.shard_bytes, record_bytes(job))
    writer = WriteShardFn(cfg, record_bytes(job), job.run_id, sink)
    if runtime.side_inputs:
        # Each step gets only what it needs: the source offsets (~16 bytes per chunk) go to AssignShards,
        # the plan (two numbers) to the writers.
        offsets = totals | "IndexSources" >> beam.Map(totals_offsets)
        plan = beam.pvalue.AsSingleton(summary | "Plan" >> beam.Map(lambda s: s[1]))
        shards = (
            all_records
            | "AssignShards" >> beam.ParDo(AssignShardsFn(cfg.seed), beam.pvalue.AsSingleton(offsets), plan)
            | "GroupByShard" >> beam.GroupByKey()  # (shard, [(positions, records)]): references only, with a sink's
            | "WriteShards" >> beam.ParDo(writer, plan)
        )
    else:
        # Each block's offset and the plan joined to it by source; the plan goes on with the blocks.
        placed = totals | "PlaceSources" >> beam.FlatMap(placed_sources, cfg.shard_bytes, record_bytes(job))
        shards = (
            join_each("JoinSources", all_records, placed)  # (source, [records], (offset, plan))
            | "AssignShards" >> beam.ParDo(AssignJoinedFn(cfg.seed))
            | "GroupByShard" >> beam.GroupByKey()  # (shard, [(placement, records, plan)])
            | "WriteShards" >> beam.ParDo(WriteJoinedShardFn(writer))
        )
    dead = processed[DEAD_LETTERS] | "WriteDeadLetters" >> WriteDeadLetters(cfg, job.run_id)
    written = {"shards": shards, "summary": summary, "dead_letters": dead}
    if cfg.provenance:  # without it, no steps of its own
        written["provenance"] = (
            tuple(stage[PROVENANCE] for stage in stages)
            | "AllProvenance" >> beam.Flatten()
            # One file per input file, one for the job's last records: (file_index or -1, block)
            | "KeyProvenanceByFile" >> beam.Map(lambda block: (block[0][2] if block[0][0] < 2 else -1, block))
            | "GroupProvenance" >> beam.GroupByKey()
            | "WriteProvenance" >> beam.ParDo(WriteProvenanceFn(cfg, job.run_id))
        )
    # The manifest is written last: the step gets its inputs once every shard has been written. An
    # output that must not be used (no records, too many dead letters) gets no manifest.
    return gather("Written", **written) | "WriteManifest" >> beam.Map(_write_manifest, job, skip_empty)


def _write_manifest(written: dict, job: Job, skip_empty: bool) -> str:
    ((stats, plan),) = written["summary"]
    manifest = build_manifest(job, written["shards"], stats, written["dead_letters"], plan.num_shards,
                              written.get("provenance", []))
    if skip_empty and not manifest["totals"]["records"]:
        LOG.info("%s: no records, no manifest", redact_url(job.config.output_dir))
        return ""
    path = commit_output(job.config.output_dir, manifest, job.config.max_dead_letter_fraction)
    LOG.info("wrote %s: %d shards, %d records", path, len(manifest["shards"]), manifest["totals"]["records"])
    return path


def summary(config: PipelineConfig, seconds: float) -> tuple[dict, str]:
    """The manifest the job wrote and the lines printed after the run."""
    manifest = manifest_lib.load_manifest(config.output_dir)
    return manifest, format_summary(manifest, seconds, output_dir=redact_url(config.output_dir))
