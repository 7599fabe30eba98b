"""The TFRecord output's packing: chunks -> records of each epoch copy, then the tails joined across chunks and files.

  Chunk                            -> ProcessChunkFn -> (source_id, Records)
                                                      + tails ((copy, file), (chunk, Piece))
                                                      + dead letters, stats, counts (source_id, n)
  ((copy, file), [(chunk, Piece)]) -> PackTailsFn    -> (source_id, Records) + Piece
  (None, [((copy, file), Piece)])  -> PackFinalFn    -> (source_id, Records) + stats
With --packing best_fit, ProcessChunkFn packs each chunk's documents whole (pipeline/core/best_fit.py)
and emits no tails. Record blocks go out through the sink each DoFn is given (pipeline/io/sinks.py).
The element shapes are pipeline/beam/tfrecord.py's.
"""

from __future__ import annotations

import logging
import time

import apache_beam as beam
import numpy as np

from pipeline.beam.chunk_documents import COUNTS, ChunkDocumentsFn, emitted
from pipeline.beam.progress import Reporter
from pipeline.beam.read import STATS, counter
from pipeline.config.job import PipelineConfig
from pipeline.core import best_fit, packing, provenance
from pipeline.core.stats import merge_into
from pipeline.format import framing, records
from pipeline.format.framing import FramedRecords, serialize_records
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.tokenize.kinds.base import SpecialIds
from pipeline.tokenize.model import TokenizerSpec

LOG = logging.getLogger(__name__)
TAILS = "tails"
PROVENANCE = "provenance"  # (source_id, number of records, spans), with --provenance


def packs_best_fit(config: PipelineConfig) -> bool:
    """Whether the records are best_fit's (whole documents, padded), not concat's."""
    return config.packing == records.BEST_FIT


def _spans_out(source: tuple, count: int, spans: np.ndarray, labels: int):
    """The PROVENANCE element of a block of `count` records holding the first `labels` labels of a stream."""
    return beam.pvalue.TaggedOutput(PROVENANCE, (source, count, provenance.split_spans(spans, labels)[0]))


def _records_out(sink: RecordSink, source: tuple, block: FramedRecords, stream: packing.Piece, labels: int):
    """A block of packed records: the main output (through `sink`), its COUNTS, (with --provenance) its PROVENANCE."""
    yield source, emitted(sink, block, source)
    yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block)))
    if stream.spans is not None:
        yield _spans_out(source, len(block), stream.spans, labels)


class ProcessChunkFn(ChunkDocumentsFn):
    """Chunk -> validated, tokenized, packed and serialized records of each epoch copy."""

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, encode_threads: int | None = None,
                 sink: RecordSink | None = None, progress: Reporter | None = None, encode_batch_bytes: int = 0):
        super().__init__(config, tokenizer, records.token_dtype_for(tokenizer.special.vocab_size), encode_threads,
                         sink, progress, encode_batch_bytes)
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
                yield from _records_out(self._sink, source, block, stream, len(tokens) * cfg.seq_len)
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
        yield source, emitted(self._sink, block, source)
        yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block)))
        if packed.spans is not None:
            yield _spans_out(source, len(packed), packed.spans, len(packed) * cfg.seq_len)
        yield beam.pvalue.TaggedOutput(STATS, {"packing": {
            "records_from_chunks": len(packed), "padding_labels": packed.padding,
            "documents_cut": packed.documents_cut, "padded_records": 0}})


class _PacksTails(beam.DoFn):
    """A DoFn that joins the tails of earlier packing, in order, and packs them; its blocks through `sink`."""

    def __init__(self, config: PipelineConfig, special: SpecialIds, sink: RecordSink | None = None):
        self._sink = sink or KEEP
        self._config = config
        self._special = special
        self._dtype = records.token_dtype_for(special.vocab_size)

    def _pack(self, tails) -> tuple[packing.Piece, np.ndarray, np.ndarray, packing.Piece]:
        """[(order key, Piece)] -> (the joined stream, its records' tokens and starts, the remainder)."""
        pieces = [piece for _, piece in sorted(tails, key=lambda t: t[0])]
        stream = packing.concat_pieces(pieces, self._special.separator_id)
        return (stream, *packing.pack(stream, self._config.seq_len))

    def teardown(self):
        self._sink.close()


class PackTailsFn(_PacksTails):
    """((copy, file), [(chunk_index, Piece)]) -> records of the joined tails, and their remainder."""

    def process(self, element):
        (copy, file_index), tails = element
        stream, tokens, starts, remainder = self._pack(tails)
        if len(tokens):
            counter("records_from_tails").inc(len(tokens))
            block = serialize_records(tokens, starts, dtype=self._dtype,
                                      document_boundaries=self._config.document_boundaries)
            yield from _records_out(self._sink, (1, copy, file_index, 0), block, stream,
                                    len(tokens) * self._config.seq_len)
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
            yield from _records_out(self._sink, (2, 0, 0, 0), out, stream, labels)
        yield beam.pvalue.TaggedOutput(STATS, {"packing": stats})
