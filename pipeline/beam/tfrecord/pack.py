"""The TFRecord output's packing steps: shells over the engine's (pipeline/process/tfrecord.py).

  Chunk                            -> ProcessChunkFn -> (source_id, Records)
                                                      + tails ((copy, file), (chunk, Piece))
                                                      + dead letters, stats, counts (source_id, n)
  ((copy, file), [(chunk, Piece)]) -> PackTailsFn    -> (source_id, Records) + Piece
  (None, [((copy, file), Piece)])  -> PackFinalFn    -> (source_id, Records) + stats
With --packing best_fit, ProcessChunkFn packs each chunk's documents whole (pipeline/core/best_fit.py)
and emits no tails. Record blocks go out through the sink each DoFn is given (pipeline/io/sinks.py).
The element shapes are pipeline/beam/tfrecord/output.py's.
"""

from __future__ import annotations

import logging
import time

import apache_beam as beam

from pipeline.beam.chunk_documents import COUNTS, ChunkDocumentsFn, emitted
from pipeline.beam.read import STATS, counter
from pipeline.config.job import PipelineConfig
from pipeline.core.stats import JobStats
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.process import tfrecord
from pipeline.process.result import Block
from pipeline.process.tfrecord import PackedRecords
from pipeline.tokenize.kinds.base import SpecialIds

LOG = logging.getLogger(__name__)
TAILS = "tails"
PROVENANCE = "provenance"  # (source_id, number of records, spans), with --provenance


def _block_out(sink: RecordSink, block: Block):
    """A block of packed records: the main output (through `sink`), its COUNTS, (with --provenance) its PROVENANCE."""
    yield block.source, emitted(sink, block.records, block.source)
    yield beam.pvalue.TaggedOutput(COUNTS, (block.source, len(block.records)))
    if block.spans is not None:
        yield beam.pvalue.TaggedOutput(PROVENANCE, (block.source, len(block.records), block.spans))


class ProcessChunkFn(ChunkDocumentsFn):
    """Chunk -> validated, tokenized, packed and serialized records of each epoch copy, and their tails."""

    writer = PackedRecords

    def setup(self):
        super().setup()
        self._last_log, self._done_chunks = time.monotonic(), 0
        self._records = counter("records_from_chunks")

    def _blocks_out(self, result):
        for block in result.blocks:
            self._records.inc(len(block.records))
            yield from _block_out(self._sink, block)
        for tail in result.tails:
            yield beam.pvalue.TaggedOutput(TAILS, ((tail.copy, result.file_index), (result.chunk_index, tail.piece)))
        self._done_chunks += 1
        if time.monotonic() - self._last_log > 30:
            LOG.info("worker progress: %d chunks tokenized and packed", self._done_chunks)
            self._last_log = time.monotonic()


class _PacksTails(beam.DoFn):
    """A DoFn that joins the tails of earlier packing, in order, and packs them; its blocks through `sink`."""

    def __init__(self, config: PipelineConfig, special: SpecialIds, sink: RecordSink | None = None):
        self._sink = sink or KEEP
        self._config = config
        self._special = special

    def _joined_out(self, joined: tfrecord.Joined):
        if joined.block is not None:
            yield from _block_out(self._sink, joined.block)
        yield beam.pvalue.TaggedOutput(STATS, JobStats(packing=joined.stats))

    def teardown(self):
        self._sink.close()


class PackTailsFn(_PacksTails):
    """((copy, file), [(chunk_index, Piece)]) -> records of the joined tails, and their remainder."""

    def process(self, element):
        (copy, file_index), tails = element
        joined = tfrecord.pack_tails(self._config, self._special, copy, file_index, list(tails))
        counter("records_from_tails").inc(joined.stats.records_from_tails)
        if len(joined.remainder):
            yield beam.pvalue.TaggedOutput(TAILS, (None, ((copy, file_index), joined.remainder)))
        yield from self._joined_out(joined)


class PackFinalFn(_PacksTails):
    """(None, [((copy, file), Piece)]) -> the last records, and the job's one partial record."""

    def process(self, element):
        _, tails = element
        yield from self._joined_out(tfrecord.pack_final(self._config, self._special, list(tails)))
