"""The engine: one work item in, one typed result out, without Beam.

    WorkItem -> Engine.validate -> Validated            the document policy, dead letters, removals, counts
    [Validated, ...] -> Engine.complete -> [ChunkResult]  tokenized in one call; each written by the
                                                          format's writer as if alone, its documents counted
    WorkItem -> Engine.process -> ChunkResult             the two in one

`ChunkResult` (pipeline/process/result.py) holds the work item's blocks, tails, dead letters,
removed/ records and counts, and serializes to bytes (`to_bytes`, `from_bytes`). The Beam steps
(pipeline/beam/chunk_documents.py and the formats' DoFns) are shells that hand it on.
"""

from __future__ import annotations

from pipeline.config.job import PipelineConfig
from pipeline.process.documents import DocumentEngine, Validated, WorkItem
from pipeline.process.formats import writer_class
from pipeline.process.result import ChunkResult
from pipeline.process.writer import Writer
from pipeline.tokenize.model import TokenizerSpec


class Engine:
    """A work item -> its ChunkResult: the document engine, then the output format's writer.

    writer: the format's Writer class (default: the one of `config.output_format`). Pickles small
    (settings only); `setup()` loads the tokenizer and the stages once per process.
    """

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, writer: type[Writer] | None = None,
                 encode_threads: int | None = None):
        self.documents = DocumentEngine(config, tokenizer, encode_threads)
        self.writer = (writer or writer_class(config.output_format))(config, tokenizer.special)

    def setup(self) -> None:
        """Load the tokenizer (and the stages where they run); once per process, before the first work item."""
        self.documents.setup()

    def validate(self, item: WorkItem) -> Validated:
        """The work item through the document policy, waiting to be tokenized."""
        return self.documents.validate(item)

    def complete(self, batch: list[Validated]) -> list[ChunkResult]:
        """Tokenize the validated work items in one call and write each: their results, in order."""
        results = []
        for docs in self.documents.tokenize(batch):
            written = self.writer.write(docs)
            docs.count_written()
            chunk = docs.chunk
            results.append(ChunkResult(chunk.file_index, chunk.chunk_index, chunk.input_bytes, written.blocks,
                                       written.tails, docs.dead_letters, docs.removed, docs.stats, docs.bucket_stats))
        return results

    def process(self, item: WorkItem) -> ChunkResult:
        """One work item's result."""
        return self.complete([self.validate(item)])[0]
