"""Dedup's input: each document the policy keeps, with the text the stages left, and the stages' verdicts.

    Chunk -> DedupInput.process -> DedupDocuments: [((file_index, line), {"text", "subset", "chunk"[, "id"]})]
                                                   + {line: Verdict} (with stages; empty when they changed nothing)

The stages run here, once, when the job dedups (pipeline/stages/policy.py's docstring says why); the
tokenizing stage replays the verdicts. Dead letters and validation's counts are the tokenizing
stage's, which reads the same lines again.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.job import PipelineConfig
from pipeline.io.inputs import Chunk


@dataclasses.dataclass
class DedupDocuments:
    """A chunk's documents for dedup, and the stages' verdicts by line (None: no stages)."""

    documents: list[tuple[tuple[int, int], dict]]
    verdicts: dict | None


class DedupInput:
    """Chunk -> DedupDocuments, through the document policy and its stages."""

    def __init__(self, config: PipelineConfig):
        self._policy = config.document_policy()

    def setup(self) -> None:
        """The stages' heavy state, once per process: they run here, not when tokenizing."""
        self._policy.setup()

    def process(self, chunk: Chunk) -> DedupDocuments:
        """The chunk's kept documents and the stages' verdicts."""
        docs, verdicts = [], {}
        for outcome in self._policy.decide(chunk):
            if outcome.verdict is not None:
                verdicts[outcome.line.number] = outcome.verdict
            if outcome.kept:
                doc = {"text": outcome.text, "subset": outcome.subset, "chunk": chunk.chunk_index}
                if outcome.id is not None:
                    doc["id"] = outcome.id  # copied into its removed record by Dedup
                docs.append(((chunk.file_index, outcome.line.number), doc))
        return DedupDocuments(docs, verdicts if self._policy.stages else None)
