"""The pipeline's Beam stages. Each DoFn delegates to pure functions of pipeline.core/format/io.

Element shapes are noted at each stage:
  (file_index, path[, frame])              -> ReadChunksFn      -> Chunk
  Chunk                                    -> ProcessChunkFn    -> (source_id, Records)
                                                                 + tails ((copy, file), (chunk, Piece))
                                                                 + dead letters ((file, span, own), (chunk, lines))
                                                                 + stats dict + counts (source_id, n)
  ((copy, file), [(chunk, Piece)])         -> PackTailsFn       -> (source_id, Records) + Piece
  (None, [((copy, file), Piece)])          -> PackFinalFn       -> (source_id, Records) + stats
  stats dicts + (source_id, n)             -> TotalsFn          -> (stats, counts) -> offsets -> ShardPlan
  (source_id, Records) + offsets + plan    -> AssignShardsFn    -> (shard, (positions, Records))
  (shard, [(positions, Records)]) + plan   -> WriteShardFn      -> shard info dict
  ((file, span, own), [(chunk, lines)])    -> WriteDeadLettersFn -> dead-letter file info dicts
  (file or -1, [(source_id, n, spans)])    -> WriteProvenanceFn -> provenance file info dict
source_id = (kind, copy, file_index, chunk_index): kind 0 chunk records, 1 per-file tails, 2 final.
positions: the permuted global positions of those records in that shard, as little-endian int64 bytes.
With --provenance, the three packing DoFns also emit (source_id, records, spans) on PROVENANCE: where
the labels of that block of records come from (pipeline/core/provenance.py).
Records: a block of TFRecord-framed records, one element for many records: a FramedRecords
(pipeline/format/framing.py) or, with a spill directory (one machine), a SpilledRecords reference to
the same bytes in a local file (pipeline/io/spill.py).
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import time

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.beam.progress import Reporter
from pipeline.config.job import PipelineConfig
from pipeline.core import documents, packing, provenance
from pipeline.core.epochs import copies_of
from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.core.sources import SourceOffsets
from pipeline.core.stats import merge_into
from pipeline.format import provenance as provenance_files
from pipeline.format import records
from pipeline.format.framing import FramedRecords, serialize_records
from pipeline.io import frames, inputs, outputs
from pipeline.io.publish import publish
from pipeline.io.snapshot import unchanged
from pipeline.io.spill import RecordReader, SpillWriter
from pipeline.io.spool import OrderedSpool
from pipeline.io.urls import redact_url
from pipeline.tokenize.engines import Encoder, TokenizerMismatch
from pipeline.tokenize.model import SpecialIds

LOG = logging.getLogger(__name__)
NAMESPACE = "pile"
TAILS = "tails"
DEAD_LETTERS = "dead_letters"
STATS = "stats"
COUNTS = "counts"  # (source_id, number of records): what the shard plan needs, without the records
DEAD_LETTER_SPAN = 64  # consecutive chunks of a file whose dead letters share a file (256 MB of input)
DEAD_LETTER_OWN_BYTES = 1 << 20  # a chunk with more dead letters than this gets a file of its own
PROVENANCE = "provenance"  # (source_id, number of records, spans), with --provenance


def _counter(name: str):
    return Metrics.counter(NAMESPACE, name)


def _spans_out(source: tuple, count: int, spans: np.ndarray, labels: int):
    """The PROVENANCE element of a block of `count` records holding the first `labels` labels of a stream."""
    return beam.pvalue.TaggedOutput(PROVENANCE, (source, count, provenance.split_spans(spans, labels)[0]))


class ReadChunksFn(beam.DoFn):
    """(file_index, path[, frame]) -> Chunk, streaming the file; file stats go to the STATS output.

    With a frame (an indexed input, pipeline/io/frames.py), only that frame is read. A damaged file
    fails the job (`on_corrupt_file="fail"`) or is recorded in the stats, keeping the lines read
    before the damage (`"skip"`). Used by every job that reads inputs.
    """

    def __init__(self, chunk_bytes: int, max_line_bytes: int, on_corrupt_file: str, progress: Reporter | None = None,
                 snapshots: dict | None = None):
        self._chunk_bytes = chunk_bytes
        self._max_line_bytes = max_line_bytes
        self._on_corrupt_file = on_corrupt_file
        self._progress = progress or Reporter()
        self._bytes = _counter("decompressed_bytes")
        self._chunks = _counter("chunks")
        self._files = _counter("files_read")
        self._snapshots = snapshots or {}  # path -> its snapshot at launch (pipeline/io/snapshot.py)

    def process(self, element):
        file_index, path = element[:2]
        unit = element[2] if len(element) > 2 else None
        shown = redact_url(path)
        lines = size = chunks = 0
        start = time.monotonic()
        LOG.info("reading %s", shown)
        file_stats: dict = {}
        try:
            for chunk in unchanged(frames.iter_unit_chunks(path, file_index, unit, self._chunk_bytes,
                                                           self._max_line_bytes), path, self._snapshots.get(path)):
                lines += len(chunk.lines)
                size += chunk.num_bytes
                chunks += 1
                self._bytes.inc(chunk.num_bytes)
                self._chunks.inc()
                self._progress.add(read=chunk.input_bytes)
                yield chunk
        except inputs.CorruptInputError as e:
            if self._on_corrupt_file == "fail":
                raise inputs.CorruptInputError(
                    f"{e} -- the job stops (pass --on_corrupt_file skip to keep the lines read before "
                    "the damage and record the file as damaged)"
                ) from None
            LOG.error("damaged input, keeping the %d lines read before the damage: %s", lines, e)
            _counter("files_damaged").inc()
            file_stats["damaged"] = str(e)
        self._files.inc()
        elapsed = max(time.monotonic() - start, 1e-9)
        LOG.info("read %s: %d lines, %.1f MB in %.1f s", shown, lines, size / 1e6, elapsed)
        file_stats.update({"path": shown, "lines": lines, "decompressed_bytes": size, "chunks": chunks})
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {f"{file_index:05d}": file_stats}})

    def finish_bundle(self):
        self._progress.flush()

    def teardown(self):
        self._progress.close()


class _EmitsRecords(beam.DoFn):
    """A DoFn whose record blocks go out as they are, or through a spill file (see pipeline/io/spill.py)."""

    def __init__(self, spill_dir: str | None):
        self._spill_dir = spill_dir
        self._spill = None

    def _emit(self, block: FramedRecords):
        if self._spill_dir is None:
            return block
        if self._spill is None:
            self._spill = SpillWriter(self._spill_dir)
        return self._spill.write(block)

    def _records_out(self, source: tuple, block: FramedRecords, stream: packing.Piece, labels: int):
        """A block of packed records: the main output, its COUNTS and (with --provenance) its PROVENANCE."""
        yield source, self._emit(block)
        yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block)))
        if stream.spans is not None:
            yield _spans_out(source, len(block), stream.spans, labels)

    def teardown(self):
        if self._spill is not None:
            self._spill.close()


@dataclasses.dataclass
class ChunkDocuments:
    """A chunk's kept documents, tokenized, and the counts of its STATS output.

    Document i (`lines[i]`, of subset `subsets[i]`) is ids[offsets[i]:offsets[i + 1]], `sizes[i]`
    tokens once written with BOS/EOS, in `copies[i]` epoch copies (-1: left out after tokenizing).
    """

    lines: list[documents.Line]
    subsets: list[str]
    ids: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    copies: np.ndarray
    counts: dict  # per subset: documents, kept, filtered (by reason), text_bytes; then tokens
    dead: dict  # dead letters by reason
    file_stats: dict  # validation's counts (documents.file_stats())

    def unkeep(self, i: int) -> dict:
        """Leave out document i, counted as kept so far; returns its subset's counts."""
        s = self.counts[self.subsets[i]]
        s["kept"] -= 1
        s["text_bytes"] -= len(self.lines[i].data)
        self.copies[i] = -1  # never written
        return s


class ChunkDocumentsFn(_EmitsRecords):
    """A chunk's lines -> kept documents, tokenized: what both output formats do before writing.

    Validation and its dead letters, subset selection, the tokenizer, epoch copies, the subsets'
    counts. ProcessChunkFn packs the documents into records; the Megatron job's TokenizeDocumentsFn
    (pipeline/beam/megatron.py) writes them one per sequence. Their dead letters are the same records.
    """

    def __init__(self, config: PipelineConfig, special: SpecialIds, dtype: np.dtype, backend: str = "sentencepiece",
                 encode_threads: int | None = None, spill_dir: str | None = None, progress: Reporter | None = None):
        super().__init__(spill_dir)
        self._config = config
        self._special = special
        self._dtype = dtype
        self._encoder = Encoder(config.tokenizer_model, backend, verify=config.verify_tokenizer != "off",
                                threads=encode_threads)
        self._selected = config.selection()
        self._schema = config.schema
        self._progress = progress or Reporter()
        self._docs = _counter("documents_kept")
        self._tokens = _counter("tokens")
        self._dead = _counter("dead_letters")
        self._filtered = _counter("documents_filtered")

    def setup(self):
        # Heavy state loads once per worker, from the model's path.
        self._encoder.load()

    def finish_bundle(self):
        self._progress.flush()

    def teardown(self):
        self._progress.close()
        super().teardown()

    def _dead_letter(self, chunk: inputs.Chunk, line: documents.Line, reason: str, detail: str, dead: dict) -> dict:
        dead[reason] = dead.get(reason, 0) + 1
        self._dead.inc()
        return {
            "file": redact_url(chunk.path),
            "file_index": chunk.file_index,
            "line": line.number,
            "offset": line.offset,
            "reason": reason,
            "detail": detail[:200],
            "prefix": documents.line_prefix(line),
        }

    @staticmethod
    def _dead_letters_out(chunk: inputs.Chunk, dead_letters: list[dict]):
        """The chunk's dead letters as one DEAD_LETTERS element (none without any): a chunk's worth at most."""
        if dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter_part(chunk, dead_letters))

    def _documents(self, chunk: inputs.Chunk) -> tuple[ChunkDocuments, list[dict]]:
        """The chunk's kept documents, tokenized, and its dead letters (bad lines, then mismatches)."""
        cfg, special = self._config, self._special
        subsets: dict = {}
        dead: dict[str, int] = {}
        file_stats = documents.file_stats()
        dead_letters, texts, kept_subsets, kept_lines = [], [], [], []
        for line in chunk.lines:
            try:
                doc = documents.validate(line, cfg.max_line_bytes, self._schema, file_stats)
            except documents.BadRecord as bad:
                dead_letters.append(self._dead_letter(chunk, line, bad.reason, bad.detail, dead))
                continue
            text, subset = doc.text, doc.subset
            s = subsets.setdefault(subset, {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0})
            s["documents"] += 1
            reason = documents.filter_reason(text, subset, self._selected)
            if reason:
                s["filtered"][reason] = s["filtered"].get(reason, 0) + 1
                self._filtered.inc()
                continue
            s["kept"] += 1
            s["text_bytes"] += len(line.data)
            texts.append(text)
            kept_subsets.append(subset)
            kept_lines.append(line)

        # (ids, offsets): every kept document's ids in one flat array.
        ids, offsets, mismatches = self._encoder.encode_verified(texts)
        copies = np.array([copies_of(cfg.epochs_of(subset), cfg.seed, chunk.file_index, line.number)
                           for subset, line in zip(kept_subsets, kept_lines, strict=True)], np.int64)
        sizes = np.diff(offsets) + special.add_bos + special.add_eos
        docs = ChunkDocuments(kept_lines, kept_subsets, ids, offsets, sizes, copies, subsets, dead, file_stats)
        for i, detail in mismatches:  # only with --verify_tokenizer: the fast backend disagreed with SentencePiece
            if cfg.verify_tokenizer == "fail":
                raise TokenizerMismatch(f"{redact_url(chunk.path)} line {kept_lines[i].number}: {detail}")
            docs.unkeep(i)["documents"] -= 1
            dead_letters.append(self._dead_letter(chunk, kept_lines[i], "tokenizer_mismatch", detail, dead))
        return docs, dead_letters

    def _stats_out(self, chunk: inputs.Chunk, docs: ChunkDocuments):
        """Count the tokens of the documents written and report progress; the chunk's STATS output."""
        written = docs.copies >= 0
        for subset, size, count in zip(docs.subsets, docs.sizes.tolist(), docs.copies.tolist(), strict=True):
            if count >= 0:
                s = docs.counts[subset]
                s["tokens"] = s.get("tokens", 0) + size
                s["tokens_with_epochs"] = s.get("tokens_with_epochs", 0) + count * size
        self._docs.inc(int(written.sum()))
        self._progress.add(done=chunk.input_bytes, docs=int(written.sum()), tokens=int(docs.sizes[written].sum()))
        return beam.pvalue.TaggedOutput(STATS, {"subsets": docs.counts, "dead_letters": docs.dead,
                                                "lines": len(chunk.lines),
                                                "inputs": {f"{chunk.file_index:05d}": docs.file_stats}})


class ProcessChunkFn(ChunkDocumentsFn):
    """Chunk -> validated, tokenized, packed and serialized records of each epoch copy."""

    def __init__(self, config: PipelineConfig, special: SpecialIds, backend: str = "sentencepiece",
                 encode_threads: int | None = None, spill_dir: str | None = None, progress: Reporter | None = None):
        super().__init__(config, special, records.token_dtype_for(special.vocab_size), backend, encode_threads,
                         spill_dir, progress)
        self._records = _counter("records_from_chunks")

    def setup(self):
        super().setup()
        self._last_log = time.monotonic()
        self._done_chunks = 0

    def process(self, chunk: inputs.Chunk):
        cfg, special = self._config, self._special
        docs, dead_letters = self._documents(chunk)
        yield from self._dead_letters_out(chunk, dead_letters)
        copies = docs.copies
        # Epoch copies are packed as separate streams, so repeats of a document land in different
        # records (and, after the global shuffle, far apart).
        for copy in range(int(copies.max(initial=0))):
            stream = packing.build_stream_flat(
                docs.ids, docs.offsets, copies > copy, bos_id=special.bos_id if special.add_bos else None,
                eos_id=special.eos_id if special.add_eos else None, separator_id=special.separator_id,
            )
            if cfg.provenance:  # the documents in stream order, as packed
                chosen = copies > copy
                numbers = np.array([line.number for line in docs.lines], np.int64)
                stream.spans = provenance.document_spans(chunk.file_index, numbers[chosen], docs.sizes[chosen])
            tokens, starts, remainder = packing.pack(stream, cfg.seq_len)
            self._tokens.inc(len(stream))
            if len(tokens):
                self._records.inc(len(tokens))
                block = serialize_records(tokens, starts, dtype=self._dtype,
                                          document_boundaries=cfg.document_boundaries)
                yield from self._records_out((0, copy, chunk.file_index, chunk.chunk_index), block, stream,
                                             len(tokens) * cfg.seq_len)
            if len(remainder):
                yield beam.pvalue.TaggedOutput(TAILS, ((copy, chunk.file_index), (chunk.chunk_index, remainder)))

        yield self._stats_out(chunk, docs)
        self._done_chunks += 1
        if time.monotonic() - self._last_log > 30:
            LOG.info("worker progress: %d chunks tokenized and packed", self._done_chunks)
            self._last_log = time.monotonic()


class _PacksTails(_EmitsRecords):
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
            _counter("records_from_tails").inc(len(tokens))
            block = serialize_records(tokens, starts, dtype=self._dtype,
                                      document_boundaries=self._config.document_boundaries)
            yield from self._records_out((1, copy, file_index, 0), block, stream, len(tokens) * self._config.seq_len)
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
            yield from self._records_out((2, 0, 0, 0), out, stream, labels)
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
    """(source_id, Records) + source offsets + plan -> (shard, (positions, Records)), one per shard touched.

    One element per (source, shard) rather than per record: far fewer elements through the shuffle.
    """

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, element, offsets: SourceOffsets, plan: ShardPlan):
        source, recs = element
        perm = Permutation(plan.num_records, self._seed)
        positions = perm(offsets.offset(source) + np.arange(len(recs))).astype("<i8")
        shards = plan.shard_of(positions)
        for shard in np.unique(shards).tolist():
            members = np.flatnonzero(shards == shard)
            yield shard, (positions[members].tobytes(), recs.take(members.tolist()))


class WriteShardFn(beam.DoFn):
    """(shard, [(positions, Records)]) + plan -> shard info; records in permuted order, temp file + rename.

    The group is read once, an element at a time, its records put into a local spool at their places
    in the shard (pipeline/io/spool.py), and written from there in order: the writer holds one element of the
    group and one ~8 MB bucket, whatever the shard's size, as long as the runner hands the group
    over lazily (docs/operations.md: which runners do). The sha256 is computed while writing. Shards
    go into the run's own directory (pipeline/io/outputs.py).
    """

    def __init__(self, config: PipelineConfig, record_bytes: int, run_id: str):
        self._config = config
        self._record_bytes = record_bytes
        self._run_id = run_id

    def process(self, element, plan: ShardPlan):
        shard, groups = element
        first, end = (int(b) for b in plan.bounds()[shard : shard + 2])
        name = outputs.run_path(self._run_id, outputs.shard_name(self._config.split, shard, plan.num_shards))
        with OrderedSpool(end - first, (end - first) * self._record_bytes) as spool, RecordReader() as reader:
            for positions, recs in groups:
                spool.add_many(np.frombuffer(positions, "<i8") - first, *reader.read_block(recs))
            size, sha = publish(posixpath.join(self._config.output_dir, name), spool)
        info = {"path": name, "records": end - first, "bytes": size, "sha256": sha}
        _counter("shards_written").inc()
        LOG.info("wrote %s: %d records, %.1f MB", name, info["records"], info["bytes"] / 1e6)
        yield info


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


def dead_letter_part(chunk: inputs.Chunk, items: list[dict]):
    """A chunk's dead-letter dicts -> ((file, first chunk, own), (chunk, JSON lines)).

    The dead letters of DEAD_LETTER_SPAN consecutive chunks of a file share one output file, so a
    corpus with a bad line in every chunk makes ~1 file per 256 MB of input, not one per chunk;
    a chunk with more than DEAD_LETTER_OWN_BYTES of them (a garbage file) gets a file of its own,
    so no group holds more than DEAD_LETTER_SPAN x DEAD_LETTER_OWN_BYTES or one chunk's worth.
    """
    file_index, chunk_index = chunk.file_index, chunk.chunk_index
    lines = b"".join(outputs.dead_letter_lines(items))
    if len(lines) > DEAD_LETTER_OWN_BYTES:
        return (file_index, chunk_index, True), (chunk_index, lines)
    return (file_index, chunk_index - chunk_index % DEAD_LETTER_SPAN, False), (chunk_index, lines)


class WriteDeadLettersFn(beam.DoFn):
    """((file, first chunk, own), [(chunk, JSON lines)]) -> info of one run-<id>/dead_letters/ file."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element):
        (file_index, first_chunk, own), parts = element
        parts = sorted(parts, key=lambda p: p[0])  # chunk order: the lines are (file, line) sorted
        name = outputs.run_path(self._run_id,
                                outputs.dead_letter_name(self._config.split, file_index, first_chunk, own=own))
        size, sha = publish(posixpath.join(self._config.output_dir, name), [lines for _, lines in parts])
        yield {"path": name, "records": sum(lines.count(b"\n") for _, lines in parts), "bytes": size,
               "sha256": sha}


class WriteDeadLetters(beam.PTransform):
    """The DEAD_LETTERS output ((file, first chunk, own), (chunk, JSON lines)) -> info of each dead_letters/ file."""

    def __init__(self, config: PipelineConfig, run_id: str):
        super().__init__()
        self._config = config
        self._run_id = run_id

    def expand(self, parts):
        return (
            parts
            | "GroupByPart" >> beam.GroupByKey()  # ((file, first chunk, own), [(chunk, lines)])
            | "Write" >> beam.ParDo(WriteDeadLettersFn(self._config, self._run_id))
        )
