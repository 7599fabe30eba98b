"""The tokenizer sample's per-chunk work: each document the policy keeps, cut and keyed; what was seen, counted.

    Chunk -> SampleKeys.process -> Keyed: [(stratum, SampleDoc)] + SampleStats

The rules (keys, budgets, what is kept) are pipeline/tokenize/sample.py's; the Beam job that runs
this on every chunk and keeps the smallest keys is pipeline/beam/sample.py.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.tokenizer import SampleConfig
from pipeline.core.stats import ALWAYS, NON_ZERO, Counts, counted
from pipeline.io.inputs import Chunk
from pipeline.tokenize.sample import NATURAL_STRATUM, SampleDoc, document_key


@dataclasses.dataclass
class SampleSubsetStats(Counts):
    """One subset's documents available to the sample (kept by the policy), their bytes, those cut, those left out."""

    documents: int = counted(0, ALWAYS)
    bytes: int = counted(0, ALWAYS)
    cut: int = counted(0, ALWAYS)
    filtered: dict = counted({}, ALWAYS)


@dataclasses.dataclass
class SampleStats(Counts):
    """What the sample's reading saw: per subset, bad lines by reason, lines, the read stage's per-file counts."""

    subsets: dict = counted({}, NON_ZERO)
    dead_letters: dict = counted({}, NON_ZERO)
    lines: int = counted(0, NON_ZERO)
    inputs: dict = counted({}, NON_ZERO)

    @classmethod
    def of(cls, part: SampleStats | dict) -> SampleStats:
        """`part` as SampleStats (a dict: the read stage's `{"inputs": {...}}`)."""
        return part if isinstance(part, SampleStats) else cls(inputs=dict(part["inputs"]))


def merge_sample_stats(parts) -> SampleStats:
    """Sum the sample's stats (usable as `beam.CombineGlobally(merge_sample_stats)`)."""
    total = SampleStats()
    for part in parts:
        total.merge(SampleStats.of(part))
    return total


@dataclasses.dataclass
class Keyed:
    """A chunk's sampled documents, (stratum, SampleDoc), and its counts."""

    docs: list[tuple[str, SampleDoc]]
    stats: SampleStats


class SampleKeys:
    """Chunk -> Keyed: validate, select, apply the stages, cut to --max_doc_chars and key each document.

    A document a stage removes is counted per subset under `filtered` by the stage's name.
    """

    def __init__(self, config: SampleConfig):
        self._config = config
        self._policy = config.document_policy()

    def setup(self) -> None:
        """The stages' heavy state, once per process."""
        self._policy.setup()

    def process(self, chunk: Chunk) -> Keyed:
        """One chunk's sampled documents and counts."""
        cfg = self._config
        stats = SampleStats(lines=len(chunk.lines))
        docs = []
        for outcome in self._policy.decide(chunk):
            if outcome.bad is not None:
                stats.dead_letters[outcome.bad.reason] = stats.dead_letters.get(outcome.bad.reason, 0) + 1
                continue
            s = stats.subsets.setdefault(outcome.subset, SampleSubsetStats())
            if outcome.reason:
                s.filtered[outcome.reason] = s.filtered.get(outcome.reason, 0) + 1
                continue
            text = outcome.text
            if len(text) > cfg.max_doc_chars:
                text = text[: cfg.max_doc_chars]
                s.cut += 1
            size = len(text.encode("utf-8"))
            s.documents += 1
            s.bytes += size
            stratum = NATURAL_STRATUM if cfg.is_natural else outcome.subset
            key = document_key(cfg.seed, chunk.file_index, outcome.line.number)
            docs.append((stratum, (key, chunk.file_index, outcome.line.number, size, outcome.subset, text)))
        return Keyed(docs, stats)
