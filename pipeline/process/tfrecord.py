"""The TFRecord output's packing: a work item's documents -> records of each epoch copy, then tails joined.

    Documents                          -> PackedRecords.write -> blocks (0, copy, file, chunk) + a tail per copy
    [(chunk, Piece)] of a (copy, file) -> pack_tails          -> block (1, copy, file, 0) + the remainder
    [((copy, file), Piece)]            -> pack_final          -> block (2, 0, 0, 0): the last records, one padded
Epoch copies are packed as separate streams, so repeats of a document land in different records
(and, after the global shuffle, far apart). With --packing best_fit each work item's documents are
packed whole (pipeline/core/best_fit.py) and there are no tails. With --split_by each bucket's
documents are packed apart, as if the work item held them alone: its blocks and tails carry the
bucket (`Block.bucket`, `Tail.bucket`), and the tails are joined within their bucket.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pipeline.config.job import PipelineConfig
from pipeline.core import best_fit, packing, provenance
from pipeline.core.stats import PackingStats, SubsetStats
from pipeline.format import framing, records
from pipeline.format.framing import FramedRecords, serialize_records
from pipeline.process.documents import Documents
from pipeline.process.result import Block, Tail
from pipeline.process.writer import Writer, Written
from pipeline.tokenize.kinds.base import SpecialIds

LOG = logging.getLogger(__name__)


def packs_best_fit(config: PipelineConfig) -> bool:
    """Whether the records are best_fit's (whole documents, padded), not concat's."""
    return config.packing == records.BEST_FIT


def _spans(spans: np.ndarray | None, labels: int) -> np.ndarray | None:
    """With --provenance, the spans of a stream's first `labels` labels (those in its records)."""
    return None if spans is None else provenance.split_spans(spans, labels)[0]


class PackedRecords(Writer):
    """Documents -> each epoch copy's full records, and what is left of it (a tail) to join later."""

    name = "tfrecord"

    @staticmethod
    def token_dtype(vocab_size: int) -> np.dtype:
        """The records' token dtype."""
        return records.token_dtype_for(vocab_size)

    def write(self, docs: Documents) -> Written:
        """The blocks of every epoch copy (source (0, copy, file, chunk)) and their tails; each bucket's apart."""
        out = Written()
        if docs.buckets is None:
            self._write(out, docs, docs.copies, None)
            return out
        buckets = np.array(docs.buckets, object)
        for bucket in sorted(set(docs.buckets)):  # a bucket's documents as if the work item held them alone
            self._write(out, docs, np.where(buckets == bucket, docs.copies, -1), bucket)
        return out

    def _write(self, out: Written, docs: Documents, copies: np.ndarray, bucket: str | None) -> None:
        """The documents of `copies` >= 0 (`docs.copies`, or one bucket's), each epoch copy packed on its own."""
        cfg, chunk = self.config, docs.chunk
        for copy in range(int(copies.max(initial=0))):
            chosen = copies > copy
            stream = packing.build_stream_flat(docs.ids, docs.offsets, chosen, **self.stream_ids())
            if cfg.provenance:  # the documents in stream order, as packed
                numbers = np.array([line.number for line in docs.lines], np.int64)
                stream.spans = provenance.document_spans(chunk.file_index, numbers[chosen], docs.sizes[chosen])
            source = (0, copy, chunk.file_index, chunk.chunk_index)
            if packs_best_fit(cfg):
                self._best_fit(out, source, stream, docs, chosen, bucket)
                continue
            tokens, starts, remainder = packing.pack(stream, cfg.seq_len)
            if len(tokens):
                block = serialize_records(tokens, starts, dtype=self.dtype, document_boundaries=cfg.document_boundaries)
                out.blocks.append(Block(source, block, _spans(stream.spans, len(tokens) * cfg.seq_len), bucket))
            if len(remainder):
                out.tails.append(Tail(copy, remainder, bucket))

    def _best_fit(self, out: Written, source: tuple, stream: packing.Piece, docs: Documents, chosen: np.ndarray,
                  bucket: str | None):
        """One epoch copy of the documents, best-fit packed on its own (nothing crosses work items).

        Packing each work item alone makes the records depend on the input and its cut into chunks
        only, never on which worker got what; its padding and cuts go into the subsets' counts (and
        the bucket's).
        """
        cfg = self.config
        packed, _ = best_fit.pack_documents(stream, docs.sizes[chosen], cfg.seq_len, cfg.packing_window,
                                            self.special.padding_id, subsets=np.array(docs.subsets)[chosen],
                                            final=True, dtype=self.dtype)
        counted = [docs.stats] + ([] if bucket is None else [docs.bucket_stats[bucket]])
        for subset, counts in packed.counts.items():
            for stats in counted:
                stats.subsets[subset].merge(SubsetStats(**counts))
        if not len(packed):
            return
        block = framing.serialize_packed(packed.tokens, packed.segment_ids, packed.positions, dtype=self.dtype)
        out.blocks.append(Block(source, block, _spans(packed.spans, len(packed) * cfg.seq_len), bucket))
        for stats in counted:
            stats.packing = (stats.packing or PackingStats()).merge(PackingStats(
                records_from_chunks=len(packed), padding_labels=packed.padding, documents_cut=packed.documents_cut,
                padded_records=0))


@dataclasses.dataclass
class Joined:
    """What joining tails made: its block (None: no full record), the remainder, the packing counts."""

    block: Block | None
    remainder: packing.Piece
    stats: PackingStats


def _join(tails: list, special: SpecialIds, seq_len: int) -> tuple[packing.Piece, np.ndarray, np.ndarray,
                                                                       packing.Piece]:
    """[(order key, Piece)] -> (the joined stream, its records' tokens and starts, the remainder)."""
    pieces = [piece for _, piece in sorted(tails, key=lambda t: t[0])]
    stream = packing.concat_pieces(pieces, special.separator_id)
    return (stream, *packing.pack(stream, seq_len))


def pack_tails(config: PipelineConfig, special: SpecialIds, copy: int, file_index: int, tails: list) -> Joined:
    """The tails of one epoch copy of one file, [(chunk_index, Piece)], joined in order: records and remainder."""
    dtype = records.token_dtype_for(special.vocab_size)
    stream, tokens, starts, remainder = _join(tails, special, config.seq_len)
    block = None
    if len(tokens):
        data = serialize_records(tokens, starts, dtype=dtype, document_boundaries=config.document_boundaries)
        block = Block((1, copy, file_index, 0), data, _spans(stream.spans, len(tokens) * config.seq_len))
    return Joined(block, remainder, PackingStats(records_from_tails=len(tokens)))


def pack_final(config: PipelineConfig, special: SpecialIds, tails: list) -> Joined:
    """Every file's last tails, [((copy, file), Piece)], joined: the last records, the job's one partial record.

    With --remainder pad the partial record is padded to seq_len; with drop its labels are counted and dropped.
    """
    cfg, dtype = config, records.token_dtype_for(special.vocab_size)
    stream, tokens, starts, remainder = _join(tails, special, cfg.seq_len)
    out = serialize_records(tokens, starts, dtype=dtype, document_boundaries=cfg.document_boundaries)
    stats = PackingStats(records_from_tails=len(tokens), remainder_labels=len(remainder), padding_labels=0,
                         dropped_labels=0)
    if len(remainder) and cfg.remainder == "pad":
        padded, pad_starts, valid = packing.pad_record(remainder, cfg.seq_len, special.padding_id)
        out = FramedRecords.concat([out, serialize_records(
            padded, pad_starts[None, :], dtype=dtype, document_boundaries=cfg.document_boundaries, valid_labels=valid,
        )])
        stats.padding_labels = cfg.seq_len - valid
        stats.padded_records = 1
    elif len(remainder):
        stats.dropped_labels = len(remainder)
        LOG.warning("--remainder drop: the job's last %d label tokens are dropped", len(remainder))
    block = None
    if len(out):
        # The padded record holds the remainder's labels.
        labels = len(stream) if stats.padded_records else len(tokens) * cfg.seq_len
        block = Block((2, 0, 0, 0), out, _spans(stream.spans, labels))
    return Joined(block, remainder, stats)
