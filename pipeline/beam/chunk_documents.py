"""Chunk -> the engine's result for it -> the format's outputs: every output format's tokenizing step.

Element shapes:
  Chunk or Committed (with dedup: (Chunk, {line: removed record}[, {line: Verdict}]))
                                         -> ChunkDocumentsFn (a format's subclass) -> the format's blocks
                                            + dead letters ((file, span, own), (chunk, lines))
                                            + removal and cut records on REMOVED (pipeline/beam/removed.py)
                                            + JobStats on STATS + counts on COUNTS
  ((file, span, own), [(chunk, lines)])  -> WriteDeadLettersFn -> dead-letter file info dicts
The work is the engine's (pipeline/process/engine.py: the document policy, the tokenizer, the
format's writer), one `ChunkResult` per chunk; a format's DoFn (pipeline/beam/tfrecord/pack.py
`ProcessChunkFn`, pipeline/beam/megatron.py `TokenizeDocumentsFn`) turns a result's blocks into its
outputs (`_blocks_out`), through the sink it is given (`emitted`, pipeline/io/sinks.py). Chunks are
validated as they come and may be tokenized several at a time (`encode_batch_bytes`,
pipeline/beam/execution.py), each written as if alone: the outputs do not depend on the batches.

With a work folder (pipeline/io/workfolder.py) every result is committed before its outputs go on,
and a chunk whose result a run before committed (a `Committed` marker of a work item not read
again, or a chunk read again) is not processed: its committed result goes on instead, the same
bytes (pipeline/process/commit.py). A chunk read again must hold what its result was made from.
"""

from __future__ import annotations

import logging
import posixpath

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.progress import Reporter
from pipeline.beam.read import STATS, counter
from pipeline.beam.removed import REMOVED, removed_part
from pipeline.config.job import PipelineConfig
from pipeline.format.framing import FramedRecords
from pipeline.io import inputs, outputs
from pipeline.io.publish import publish
from pipeline.io.record_files import load_chunk
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.workfolder import WorkFolder
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.process.result import ChunkResult
from pipeline.process.taking_up import TakingUp
from pipeline.process.writer import Writer
from pipeline.tokenize.engines import BATCHED
from pipeline.tokenize.model import TokenizerSpec

LOG = logging.getLogger(__name__)
DEAD_LETTERS = "dead_letters"
COUNTS = "counts"  # what a format's shard plan needs, without the records
DEAD_LETTER_SPAN = 64  # consecutive chunks of a file whose dead letters share a file (256 MB of input)
DEAD_LETTER_OWN_BYTES = 1 << 20  # a chunk with more dead letters than this gets a file of its own


def emitted(sink: RecordSink, block: FramedRecords, source: tuple):
    """What a step emits for a block of records from `source`: what its sink gives (the block, or a reference)."""
    return sink.put(block, "-".join(map(str, source)))


class ChunkDocumentsFn(beam.DoFn):
    """A chunk -> the engine's ChunkResult -> this step's outputs (a format's subclass gives `_blocks_out`).

    With `encode_batch_bytes` and an engine that gains from larger calls (engines.BATCHED) the
    chunks wait for their batch until it holds that many bytes or the bundle finishes (at most that
    and one chunk of lines), then are tokenized in one call.
    """

    writer: type[Writer]  # the format's engine writer (pipeline/process/)

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, encode_threads: int | None = None,
                 sink: RecordSink | None = None, progress: Reporter | None = None, encode_batch_bytes: int = 0,
                 work: WorkFolder | None = None):
        self._engine = Engine(config, tokenizer, self.writer, encode_threads)
        self._taking_up = TakingUp(work, config)  # where results are committed (None: nowhere)
        self._sink = sink or KEEP  # where the record blocks go (pipeline/io/sinks.py)
        self._batch_limit = encode_batch_bytes if tokenizer.backend.name in BATCHED else 0
        self._progress = progress or Reporter()
        self._counters = {name: counter(name) for name in ("documents_kept", "tokens", "dead_letters",
                                                           "documents_filtered", "chunks_reused")}

    def setup(self):
        self._engine.setup()  # heavy state, once per worker, from the tokenizer's location (and the stages')

    def teardown(self):
        self._progress.close()
        self._sink.close()

    def start_bundle(self):
        self._batch, self._batch_bytes = [], 0
        self._taking_up.drain()

    def process(self, element):
        """Validate a chunk now; tokenize it with the chunks before it once `encode_batch_bytes` are waiting.

        A chunk claimed from a file shared by the workers, or the last of a queued group of work
        items (`Chunk.tokenize_now`), goes at once with those waiting: a taken group is then done when
        its reading ends, and no worker holds chunks while the others finish. A chunk with a
        committed result goes on at once, not processed (module docstring).
        """
        chunk, removed, verdicts = parts_of(element)
        found, chunk, read = self._taking_up.take(chunk, removed, verdicts)
        if read is not None:
            yield beam.pvalue.TaggedOutput(STATS, read)
        if found is not None:
            self._counters["chunks_reused"].inc()
            yield from self._outputs(found)
            if chunk.tokenize_now:
                yield from self._flush()
            return
        item = WorkItem(load_chunk(chunk), removed, verdicts)
        self._batch.append(self._engine.validate(item))
        self._batch_bytes += item.chunk.num_bytes
        if item.chunk.tokenize_now or self._batch_bytes >= self._batch_limit:
            yield from self._flush()

    def finish_bundle(self):
        for out in self._flush():
            tag, value = (out.tag, out.value) if isinstance(out, beam.pvalue.TaggedOutput) else (None, out)
            value = GlobalWindows.windowed_value(value)
            yield value if tag is None else beam.pvalue.TaggedOutput(tag, value)
        self._progress.flush()

    def _flush(self):
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        digests = self._taking_up.drain() or [None] * len(batch)
        if batch:
            for item, result, digest in zip(batch, self._engine.complete(batch), digests, strict=True):
                self._taking_up.commit(result, item.chunk, digest)  # before anything of it goes on
                yield from self._outputs(result)

    def _outputs(self, result: ChunkResult):
        """A result's dead letters, the format's outputs, its stats and removed/ records; the counters."""
        if result.dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter_part(result, result.dead_letters))
        yield from self._blocks_out(result)
        yield beam.pvalue.TaggedOutput(STATS, result.stats)
        if result.removed:
            yield beam.pvalue.TaggedOutput(REMOVED, removed_part(result, result.removed))
        documents, counters = result.documents, self._counters
        for name, n in (("documents_kept", documents), ("tokens", result.tokens_with_epochs),
                        ("dead_letters", len(result.dead_letters)), ("documents_filtered", result.filtered)):
            counters[name].inc(n)
        self._progress.add(done=result.input_bytes, docs=documents, tokens=result.tokens)

    def _blocks_out(self, result: ChunkResult):
        """The format's outputs of a result's blocks and tails."""
        raise NotImplementedError


def parts_of(element) -> tuple:
    """A tokenizing stage's element -> (chunk, removed records, verdicts).

    A Chunk (or SpilledChunk, or Committed); with dedup (chunk, {line: removed record}), and with
    stages too ({line: Verdict}) as well.
    """
    if not isinstance(element, tuple):
        return element, None, None
    chunk, removed, *verdicts = element
    return chunk, removed, verdicts[0] if verdicts else None


def dead_letter_part(chunk: inputs.Chunk | ChunkResult, items: list[dict]):
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
