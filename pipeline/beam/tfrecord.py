"""`--output_format tfrecord` (the default): documents packed into fixed-length records, shuffled into shards.

Element shapes:
  Chunk                                    -> ProcessChunkFn    -> (source_id, Records)
                                                                 + tails ((copy, file), (chunk, Piece))
                                                                 + dead letters, stats, counts (source_id, n)
  ((copy, file), [(chunk, Piece)])         -> PackTailsFn       -> (source_id, Records) + Piece
  (None, [((copy, file), Piece)])          -> PackFinalFn       -> (source_id, Records) + stats
  stats dicts + (source_id, n)             -> TotalsFn          -> (stats, counts) -> offsets -> ShardPlan
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
Records: a block of TFRecord-framed records, one element for many records: a FramedRecords
(pipeline/format/framing.py) or, with a spill directory (one machine), a SpilledRecords reference to
the same bytes in a local file (pipeline/io/spill.py). Reading and the chunks' documents are every
format's (pipeline/beam/read.py, pipeline/beam/chunk_documents.py).
"""

# One module over 400 lines on purpose: the TFRecord format's stages share its element shapes, tags
# and shard plan, and each is short; the module answers "where is packing, where are the shards
# assigned and written" in one place, as pipeline/beam/megatron.py does for its format.

from __future__ import annotations

import itertools
import logging
import posixpath
import time

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.chunk_documents import (
    COUNTS,
    DEAD_LETTERS,
    ChunkDocumentsFn,
    EmitsRecords,
    WriteDeadLetters,
)
from pipeline.beam.execution import Workspace
from pipeline.beam.manifest import shared_entries, tokenizer_json
from pipeline.beam.preflight import Job
from pipeline.beam.progress import Reporter
from pipeline.beam.read import STATS, counter, reporter
from pipeline.beam.removed import REMOVED, removed_files
from pipeline.config.job import PipelineConfig
from pipeline.core import best_fit, packing, provenance
from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.core.sources import SourceOffsets
from pipeline.core.stats import merge_into, sorted_dict
from pipeline.format import framing, records
from pipeline.format import manifest as manifest_lib
from pipeline.format import provenance as provenance_files
from pipeline.format.framing import FramedRecords, serialize_records
from pipeline.format.summary import format_summary
from pipeline.io import outputs
from pipeline.io.outputs import commit_output
from pipeline.io.publish import publish
from pipeline.io.spill import PiecePool, RecordReader, SpilledRecords, likely_cached, ordered_pieces
from pipeline.io.spool import OrderedSpool
from pipeline.io.urls import redact_url
from pipeline.tokenize.kinds.base import SpecialIds
from pipeline.tokenize.model import TokenizerSpec

LOG = logging.getLogger(__name__)
TAILS = "tails"
PROVENANCE = "provenance"  # (source_id, number of records, spans), with --provenance


def token_dtype(job: Job) -> np.dtype:
    """Token dtype of the records."""
    return records.token_dtype_for(job.tokenizer.special.vocab_size)


def record_bytes(job: Job) -> int:
    """Framed size of every full record (they all have the same size)."""
    return framing.record_bytes(job.config.seq_len, token_dtype(job), job.config.document_boundaries)


def packs_best_fit(config: PipelineConfig) -> bool:
    """Whether the records are best_fit's (whole documents, padded), not concat's."""
    return config.packing == records.BEST_FIT


def _spans_out(source: tuple, count: int, spans: np.ndarray, labels: int):
    """The PROVENANCE element of a block of `count` records holding the first `labels` labels of a stream."""
    return beam.pvalue.TaggedOutput(PROVENANCE, (source, count, provenance.split_spans(spans, labels)[0]))


def _records_out(fn: EmitsRecords, source: tuple, block: FramedRecords, stream: packing.Piece, labels: int):
    """A block of packed records: the main output, its COUNTS and (with --provenance) its PROVENANCE."""
    yield source, fn._emit(block)
    yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block)))
    if stream.spans is not None:
        yield _spans_out(source, len(block), stream.spans, labels)


class ProcessChunkFn(ChunkDocumentsFn):
    """Chunk -> validated, tokenized, packed and serialized records of each epoch copy."""

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, encode_threads: int | None = None,
                 spill_dir: str | None = None, progress: Reporter | None = None, encode_batch_bytes: int = 0):
        super().__init__(config, tokenizer, records.token_dtype_for(tokenizer.special.vocab_size), encode_threads,
                         spill_dir, progress, encode_batch_bytes)
        self._records = counter("records_from_chunks")

    def setup(self):
        super().setup()
        self._last_log = time.monotonic()
        self._done_chunks = 0

    def _chunk_out(self, chunk, docs, dead_letters):
        cfg, special = self._config, self._special
        yield from self._dead_letters_out(chunk, dead_letters)
        copies = docs.copies
        # Epoch copies are packed as separate streams, so repeats of a document land in different
        # records (and, after the global shuffle, far apart).
        for copy in range(int(copies.max(initial=0))):
            stream = packing.build_stream_flat(
                docs.ids, docs.offsets, copies > copy, bos_id=special.bos_id if special.add_bos else None,
                eos_id=special.eos_id if special.add_eos else None, separator_id=special.separator_id,
            )
            chosen = copies > copy
            if cfg.provenance:  # the documents in stream order, as packed
                numbers = np.array([line.number for line in docs.lines], np.int64)
                stream.spans = provenance.document_spans(chunk.file_index, numbers[chosen], docs.sizes[chosen])
            self._tokens.inc(len(stream))
            source = (0, copy, chunk.file_index, chunk.chunk_index)
            if packs_best_fit(cfg):
                yield from self._best_fit(source, stream, docs, chosen)
                continue
            tokens, starts, remainder = packing.pack(stream, cfg.seq_len)
            if len(tokens):
                self._records.inc(len(tokens))
                block = serialize_records(tokens, starts, dtype=self._dtype,
                                          document_boundaries=cfg.document_boundaries)
                yield from _records_out(self, source, block, stream, len(tokens) * cfg.seq_len)
            if len(remainder):
                yield beam.pvalue.TaggedOutput(TAILS, ((copy, chunk.file_index), (chunk.chunk_index, remainder)))

        yield self._stats_out(chunk, docs)
        self._done_chunks += 1
        if time.monotonic() - self._last_log > 30:
            LOG.info("worker progress: %d chunks tokenized and packed", self._done_chunks)
            self._last_log = time.monotonic()

    def _best_fit(self, source: tuple, stream: packing.Piece, docs, chosen: np.ndarray):
        """One epoch copy of a chunk's documents, best-fit packed on its own (nothing crosses chunks).

        Packing each chunk alone makes the records depend on the input and its cut into chunks only,
        never on which worker got what; its padding and cuts go into the chunk's subset counts.
        """
        cfg = self._config
        packed, _ = best_fit.pack_documents(stream, docs.sizes[chosen], cfg.seq_len, cfg.packing_window,
                                            self._special.padding_id, subsets=np.array(docs.subsets)[chosen],
                                            final=True, dtype=self._dtype)
        for subset, counts in packed.counts.items():
            merge_into(docs.counts.setdefault(subset, {}), counts)
        if not len(packed):
            return
        self._records.inc(len(packed))
        block = framing.serialize_packed(packed.tokens, packed.segment_ids, packed.positions, dtype=self._dtype)
        yield source, self._emit(block)
        yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block)))
        if packed.spans is not None:
            yield _spans_out(source, len(packed), packed.spans, len(packed) * cfg.seq_len)
        yield beam.pvalue.TaggedOutput(STATS, {"packing": {
            "records_from_chunks": len(packed), "padding_labels": packed.padding,
            "documents_cut": packed.documents_cut, "padded_records": 0}})


class _PacksTails(EmitsRecords):
    """A DoFn that joins the tails of earlier packing, in order, and packs them."""

    def __init__(self, config: PipelineConfig, special: SpecialIds, spill_dir: str | None = None):
        super().__init__(spill_dir)
        self._config = config
        self._special = special
        self._dtype = records.token_dtype_for(special.vocab_size)

    def _pack(self, tails) -> tuple[packing.Piece, np.ndarray, np.ndarray, packing.Piece]:
        """[(order key, Piece)] -> (the joined stream, its records' tokens and starts, the remainder)."""
        pieces = [piece for _, piece in sorted(tails, key=lambda t: t[0])]
        stream = packing.concat_pieces(pieces, self._special.separator_id)
        return (stream, *packing.pack(stream, self._config.seq_len))


class PackTailsFn(_PacksTails):
    """((copy, file), [(chunk_index, Piece)]) -> records of the joined tails, and their remainder."""

    def process(self, element):
        (copy, file_index), tails = element
        stream, tokens, starts, remainder = self._pack(tails)
        if len(tokens):
            counter("records_from_tails").inc(len(tokens))
            block = serialize_records(tokens, starts, dtype=self._dtype,
                                      document_boundaries=self._config.document_boundaries)
            yield from _records_out(self, (1, copy, file_index, 0), block, stream, len(tokens) * self._config.seq_len)
        if len(remainder):
            yield beam.pvalue.TaggedOutput(TAILS, (None, ((copy, file_index), remainder)))
        yield beam.pvalue.TaggedOutput(STATS, {"packing": {"records_from_tails": len(tokens)}})


class PackFinalFn(_PacksTails):
    """(None, [((copy, file), Piece)]) -> the last records, and the job's one partial record."""

    def process(self, element):
        _, tails = element
        cfg = self._config
        stream, tokens, starts, remainder = self._pack(tails)
        out = serialize_records(tokens, starts, dtype=self._dtype, document_boundaries=cfg.document_boundaries)
        stats = {"records_from_tails": len(tokens), "remainder_labels": len(remainder),
                 "padding_labels": 0, "dropped_labels": 0}
        if len(remainder) and cfg.remainder == "pad":
            padded, pad_starts, valid = packing.pad_record(remainder, cfg.seq_len, self._special.padding_id)
            out = FramedRecords.concat([out, serialize_records(
                padded, pad_starts[None, :], dtype=self._dtype,
                document_boundaries=cfg.document_boundaries, valid_labels=valid,
            )])
            stats["padding_labels"] = cfg.seq_len - valid
            stats["padded_records"] = 1
        elif len(remainder):
            stats["dropped_labels"] = len(remainder)
            LOG.warning("--remainder drop: the job's last %d label tokens are dropped", len(remainder))
        if len(out):
            # The padded record holds the remainder's labels.
            labels = len(stream) if stats.get("padded_records") else len(tokens) * cfg.seq_len
            yield from _records_out(self, (2, 0, 0, 0), out, stream, labels)
        yield beam.pvalue.TaggedOutput(STATS, {"packing": stats})


class TotalsFn(beam.CombineFn):
    """STATS dicts and COUNTS (source_id, n) -> (summed stats, [(source_id, n)]): one combine for both."""

    def create_accumulator(self):
        return {}, []

    def add_input(self, accumulator, element):
        stats, counts = accumulator
        if isinstance(element, dict):
            merge_into(stats, element)
        else:
            counts.append(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        stats, counts = self.create_accumulator()
        for more_stats, more_counts in accumulators:
            merge_into(stats, more_stats)
            counts += more_counts
        return stats, counts

    def extract_output(self, accumulator):
        return accumulator


def totals_stats(totals: tuple[dict, list]) -> dict:
    """The job's summed stats, from TotalsFn's output."""
    return totals[0]


def totals_offsets(totals: tuple[dict, list]) -> SourceOffsets:
    """Where each record source starts in the job's global record order, from TotalsFn's output."""
    return SourceOffsets.from_counts(totals[1])


def plan_shards(offsets: SourceOffsets, shard_bytes: int, record_bytes: int) -> ShardPlan:
    """How many shards, from the job's record count: all that writers and the manifest need to know."""
    return ShardPlan.for_size(offsets.num_records, record_bytes, shard_bytes)


class AssignShardsFn(beam.DoFn):
    """(source_id, Records) + source offsets + plan -> (shard, (placement, Records)), one per shard touched.

    One element per (source, shard) rather than per record: far fewer elements through the shuffle.
    The placement (`shard_places`) is the global index of the block's first record when the whole
    block goes to one shard (always, with one shard): the writer then computes every position of the
    shard in one call, and what crosses the shuffle does not grow with the records (a spilled
    block's reference pickles as four numbers too: pipeline/io/spill.py). A spilled block split
    between shards goes to each whole, placed as (its first record's global index, the indices in
    the block of the shard's records as uint32 bytes), and each writer takes its records from it;
    records that cross the shuffle themselves are split here, placed by their permuted positions
    (int64 bytes). With several shards the blocks of a bundle are permuted together, up to
    ASSIGN_BATCH_RECORDS records or ASSIGN_BATCH_BYTES of records held in memory at a time: a call
    per block of a few thousand records spends most of its time walking the cycles of its last values.
    """

    ASSIGN_BATCH_RECORDS = 1 << 20
    ASSIGN_BATCH_BYTES = 64 << 20

    def __init__(self, seed: int):
        self._seed = seed

    def start_bundle(self):
        self._held: list[tuple] = []
        self._held_records = self._held_bytes = 0
        self._side: tuple[SourceOffsets, ShardPlan] | None = None

    def process(self, element, offsets: SourceOffsets, plan: ShardPlan):
        source, recs = element
        if plan.num_shards == 1:
            if len(recs):
                yield 0, (offsets.offset(source), recs)
            return
        self._side = (offsets, plan)
        self._held.append(element)
        self._held_records += len(recs)
        self._held_bytes += 0 if isinstance(recs, SpilledRecords) else len(recs.data)
        if self._held_records >= self.ASSIGN_BATCH_RECORDS or self._held_bytes >= self.ASSIGN_BATCH_BYTES:
            yield from self._assign()

    def finish_bundle(self):
        for out in self._assign():
            yield GlobalWindows.windowed_value(out)

    def _assign(self):
        held, self._held, self._held_records, self._held_bytes = self._held, [], 0, 0
        if not held:
            return
        offsets, plan = self._side
        counts = np.array([len(recs) for _, recs in held], np.int64)
        firsts = np.array([offsets.offset(source) for source, _ in held], np.int64)
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        all_positions = Permutation(plan.num_records, self._seed)(np.repeat(firsts, counts) + within).astype("<i8")
        all_shards = plan.shard_of(all_positions)
        ends = np.cumsum(counts)
        for (_, recs), block_first, end, count in zip(held, firsts.tolist(), ends.tolist(), counts.tolist(),
                                                      strict=True):
            positions, shards = all_positions[end - count : end], all_shards[end - count : end]
            touched = np.unique(shards).tolist()
            if len(touched) == 1:  # the whole block in one shard: no copy of it
                yield touched[0], (block_first, recs)
                continue
            for shard in touched:
                members = np.flatnonzero(shards == shard)
                if isinstance(recs, SpilledRecords):
                    yield shard, ((block_first, members.astype("<u4").tobytes()), recs)
                else:
                    yield shard, (positions[members].tobytes(), recs.take(members.tolist()))


def shard_members(placement, recs):
    """A block's (placement, records) as this shard holds them.

    A (first index, members) placement becomes its records' global indices (int64) and the block a
    reference to those records only; other placements are returned as they are.
    """
    if isinstance(placement, tuple):
        block_first, members = placement
        members = np.frombuffer(members, "<u4").astype(np.int64)
        return block_first + members, recs.take(members)
    return placement, recs


def shard_places(placements: list, lengths: list[int], perm: Permutation, first: int) -> list[np.ndarray]:
    """Each block's places in its shard (int64), from its placement (`shard_members` applied).

    A placement is the records' permuted positions (int64 bytes), the global index of the block's
    first record (all its records in this shard) or the records' global indices (an int64 array).
    The blocks placed by index are permuted together, in one call.
    """
    out = [np.frombuffer(p, "<i8") - first if isinstance(p, bytes) else None for p in placements]
    indexed = [k for k, placement in enumerate(placements) if not isinstance(placement, bytes)]
    if indexed:
        indices = [placements[k] if isinstance(placements[k], np.ndarray)
                   else np.arange(int(placements[k]), int(placements[k]) + lengths[k], dtype=np.int64)
                   for k in indexed]
        places = perm(np.concatenate(indices)) - first
        for k, part in zip(indexed, np.split(places, np.cumsum([len(x) for x in indices])[:-1]), strict=True):
            out[k] = part
    return out


class WriteShardFn(beam.DoFn):
    """(shard, [(placement, Records)]) + plan -> shard info; records in permuted order, temp file + rename.

    The group is read once, an element at a time, its records put into a local spool at their places
    in the shard (pipeline/io/spool.py), and written from there in order: the writer holds one element of the
    group and one ~8 MB bucket, whatever the shard's size, as long as the runner hands the group
    over lazily (docs/operations.md: which runners do). When every record is in spill files that
    are likely still in the page cache (`spill_dir`, pipeline/io/spill.py), only the references are
    held and the shard is gathered from those files in order. The sha256 is computed while writing.
    Shards go into the run's own directory (pipeline/io/outputs.py). A placement: see AssignShardsFn.
    """

    def __init__(self, config: PipelineConfig, record_bytes: int, run_id: str, spill_dir: str | None = None):
        self._config = config
        self._record_bytes = record_bytes
        self._run_id = run_id
        self._spill_dir = spill_dir

    def process(self, element, plan: ShardPlan):
        shard, groups = element
        first, end = (int(b) for b in plan.bounds()[shard : shard + 2])
        perm = Permutation(plan.num_records, self._config.seed)
        name = outputs.run_path(self._run_id, outputs.shard_name(self._config.split, shard, plan.num_shards))
        path = posixpath.join(self._config.output_dir, name)
        groups = iter(groups)
        spilled: list[tuple[bytes | int, SpilledRecords]] = []
        if self._spill_dir and likely_cached(self._spill_dir):
            for placement, recs in groups:
                if not isinstance(recs, SpilledRecords):
                    groups = itertools.chain([(placement, recs)], groups)
                    break
                spilled.append(shard_members(placement, recs))
            else:
                places = shard_places([p for p, _ in spilled], [len(r) for _, r in spilled], perm, first)
                blocks = list(zip(places, (r for _, r in spilled), strict=True))
                pool = PiecePool()
                size, sha = publish(path, ordered_pieces(blocks, end - first, self._record_bytes, pool=pool),
                                    parts_kept=True, release=pool.give)
                yield self._written(name, end - first, size, sha)
                return
        with OrderedSpool(end - first, (end - first) * self._record_bytes) as spool, RecordReader() as reader:
            for placement, recs in itertools.chain(spilled, groups):
                placement, recs = shard_members(placement, recs)
                places = shard_places([placement], [len(recs)], perm, first)[0]
                spool.add_many(places, *reader.read_block(recs))
            size, sha = publish(path, spool)
        yield self._written(name, end - first, size, sha)

    @staticmethod
    def _written(name: str, records: int, size: int, sha: str) -> dict:
        counter("shards_written").inc()
        LOG.info("wrote %s: %d records, %.1f MB", name, records, size / 1e6)
        return {"path": name, "records": records, "bytes": size, "sha256": sha}


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




def build_manifest(job: Job, shards: list[dict], stats: dict, dead_letters: list[dict], num_shards: int,
                   provenance: list[dict] | None = None) -> dict:
    """The manifest's content (pure, so tests can check it without Beam)."""
    cfg = job.config
    shards = sorted(shards, key=lambda s: s["path"])
    packing_stats = stats.get("packing", {})
    num_records = sum(s["records"] for s in shards)
    manifest = shared_entries(cfg, job.run_id, stats, dead_letters)
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
    cfg, spill_dir = job.config, workspace.spill_dir
    processed = chunks | "TokenizeAndPack" >> beam.ParDo(
        ProcessChunkFn(cfg, job.tokenizer, job.execution.encode_threads, spill_dir, reporter(job, workspace),
                       encode_batch_bytes=job.execution.encode_batch_bytes)
    ).with_outputs(TAILS, DEAD_LETTERS, STATS, COUNTS,
                   PROVENANCE, REMOVED, main="records")
    if packs_best_fit(cfg):  # every chunk packed whole: no tails to join
        stages = [processed]
    else:
        file_tails = (
            processed[TAILS]
            | "GroupTailsByFile" >> beam.GroupByKey()  # ((copy, file), [(chunk, Piece)])
            | "PackTails" >> beam.ParDo(PackTailsFn(cfg, job.tokenizer.special, spill_dir)).with_outputs(
                TAILS, STATS, COUNTS, PROVENANCE, main="records"
            )
        )
        final = (
            file_tails[TAILS]
            | "GroupLastTails" >> beam.GroupByKey()  # (None, [((copy, file), Piece)]): one small group
            | "PackFinal" >> beam.ParDo(PackFinalFn(cfg, job.tokenizer.special, spill_dir)).with_outputs(
                STATS, COUNTS, PROVENANCE, main="records"
            )
        )
        stages = [processed, file_tails, final]
    all_records = tuple(stage.records for stage in stages) | "AllRecords" >> beam.Flatten()
    # One global combine for the stats and the record counts (every step of a DirectRunner job runs
    # after the other, ~20 ms each). Record counts come from the producers themselves: counting
    # `all_records` would be one more pass of every record through the driver on DirectRunner. Never
    # empty (every work item read reports its file's stats), so no default value is needed.
    totals = (
        (read_stats, *(stage[STATS] for stage in stages), *(stage[COUNTS] for stage in stages),
         *removed_files(cfg, job.run_id, processed))
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(TotalsFn()).without_defaults()
    )
    stats = totals | "Stats" >> beam.Map(totals_stats)
    offsets = totals | "IndexSources" >> beam.Map(totals_offsets)
    # Each step gets only what it needs: the source offsets (~16 bytes per chunk) go to AssignShards,
    # the plan (two numbers) to the writers and the manifest.
    plan = beam.pvalue.AsSingleton(offsets | "PlanShards" >> beam.Map(
        plan_shards, cfg.shard_bytes, record_bytes(job)))
    shards = (
        all_records
        | "AssignShards" >> beam.ParDo(AssignShardsFn(cfg.seed), beam.pvalue.AsSingleton(offsets), plan)
        | "GroupByShard" >> beam.GroupByKey()  # (shard, [(positions, records)]): references only, with a spill_dir
        | "WriteShards" >> beam.ParDo(WriteShardFn(cfg, record_bytes(job), job.run_id, spill_dir), plan)
    )
    dead = processed[DEAD_LETTERS] | "WriteDeadLetters" >> WriteDeadLetters(cfg, job.run_id)
    provenance = []  # without --provenance: no step (each costs ~20 ms on DirectRunner, even empty)
    if cfg.provenance:
        provenance = beam.pvalue.AsList(
            tuple(stage[PROVENANCE] for stage in stages)
            | "AllProvenance" >> beam.Flatten()
            # One file per input file, one for the job's last records: (file_index or -1, block)
            | "KeyProvenanceByFile" >> beam.Map(lambda block: (block[0][2] if block[0][0] < 2 else -1, block))
            | "GroupProvenance" >> beam.GroupByKey()
            | "WriteProvenance" >> beam.ParDo(WriteProvenanceFn(cfg, job.run_id))
        )
    # The manifest is written last: its side inputs exist only once every shard has been written.
    # An output that must not be used (no records, too many dead letters) gets no manifest.
    return (
        p
        | "ManifestTrigger" >> beam.Create([None])
        | "WriteManifest"
        >> beam.Map(
            _write_manifest,
            job,
            skip_empty,
            shards=beam.pvalue.AsList(shards),
            stats=beam.pvalue.AsSingleton(stats),
            dead_letters=beam.pvalue.AsList(dead),
            plan=plan,
            provenance=provenance,
        )
    )


def _write_manifest(_, job: Job, skip_empty: bool, shards, stats, dead_letters, plan: ShardPlan, provenance) -> str:
    manifest = build_manifest(job, list(shards), stats, list(dead_letters), plan.num_shards, list(provenance))
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
