"""What the report learns by reading a run's files once: removed/'s records, then each input.

Records (one pass over removed/): counts by (reason, rule, subset); each rule's numeric fields (the
deciding value, a threshold where the record carries one, a language score, a near duplicate's
similarity); dedup's clusters (the removed documents naming each kept twin); a seeded sample of
each rule's records to show.

Inputs (one pass over each input that has removed documents, pipeline/inspect/readback.py, its
counts checked): every valid, selected document's length in characters, binned on a log scale, as
kept or by the rule that removed it; the sampled documents read back and decided again
(pipeline/inspect/replay.py). Memory stays bounded: fixed bins, a capped reservoir of values per
field, one input's records at a time (walked in line order beside the input's lines).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator

import numpy as np

from pipeline.core.documents import BadRecord, Line, file_stats, validate
from pipeline.core.hashing import stable_hash
from pipeline.inspect.output import Output, rule_of
from pipeline.inspect.readback import max_line_bytes, read_input, schema_of
from pipeline.inspect.removed import OWN_KEYS, Shown
from pipeline.inspect.replay import Replay
from pipeline.inspect.select import Sampler

# Length bins, in characters: [0, 1), then ten a decade from 1 to 10^8 (the last one open).
LENGTH_EDGES = np.concatenate([[0.0], 10.0 ** (np.arange(0, 81) / 10.0)])
MAX_VALUES = 100_000  # values kept per (reason, rule, field): a seeded sample beyond that
# Numeric fields that are not a value a rule decided on: where a record was made, a count of tokens.
NOT_VALUES = frozenset({"chunk", "tokens"})
KEPT = ("kept", "")  # the length histogram of the documents kept


def is_threshold(field: str) -> bool:
    """A field that holds a rule's threshold rather than the document's value."""
    return ("threshold" in field or field.startswith(("min_", "max_")) or field.endswith(("_min", "_max")))


def _numeric(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


@dataclasses.dataclass
class Values:
    """A field's values over one rule's records (a seeded sample once there are more than `MAX_VALUES`)."""

    count: int = 0
    kept: list = dataclasses.field(default_factory=list)  # [(hash, value)] while sampling

    def add(self, value: float, key: int) -> None:
        """One record's value; `key` its seeded hash (which values a full reservoir keeps)."""
        self.count += 1
        self.kept.append((key, float(value)))
        if len(self.kept) >= 2 * MAX_VALUES:
            self.kept = sorted(self.kept)[:MAX_VALUES]

    def array(self) -> np.ndarray:
        """The values kept."""
        return np.array([v for _, v in sorted(self.kept)[:MAX_VALUES]], dtype=np.float64)


@dataclasses.dataclass
class RecordStats:
    """What removed/'s records say, read once (module docstring)."""

    counts: Counter = dataclasses.field(default_factory=Counter)  # (reason, rule, subset) -> records
    values: dict = dataclasses.field(default_factory=dict)  # (reason, rule, field) -> Values
    thresholds: dict = dataclasses.field(default_factory=dict)  # (reason, rule, field) -> Counter of values
    twins: dict = dataclasses.field(default_factory=dict)  # reason -> Counter of (twin file, twin line)
    examples: list = dataclasses.field(default_factory=list)  # records sampled to show

    def add(self, record: dict) -> None:
        """One record."""
        reason, rule = record["reason"], rule_of(record)
        self.counts[reason, rule, record["subset"]] += 1
        key = None
        for field, value in record.items():
            if field in OWN_KEYS or field in NOT_VALUES or field.startswith("twin_") or not _numeric(value):
                continue
            if is_threshold(field):
                self.thresholds.setdefault((reason, rule, field), Counter())[value] += 1
            else:
                key = stable_hash(record["file_index"], record["line"], reason) if key is None else key
                self.values.setdefault((reason, rule, field), Values()).add(value, key)
        if "twin_line" in record:
            self.twins.setdefault(reason, Counter())[record.get("twin_file_index"), record["twin_line"]] += 1

    def cluster_sizes(self, reason: str) -> Counter:
        """{cluster size (the kept twin and the documents removed as its duplicates): clusters}."""
        return Counter(n + 1 for n in self.twins.get(reason, Counter()).values())


def read_records(output: Output, examples: int, seed: int) -> RecordStats:
    """One pass over the output's removed/ records; `examples` of each rule sampled with `seed`."""
    stats = RecordStats()
    sampler = Sampler(examples, seed, per_rule=True) if examples else None
    if output.removed is not None:
        for record in output.records():
            stats.add(record)
            if sampler is not None:
                sampler.add(record)
    stats.examples = sampler.chosen() if sampler is not None else []
    return stats


@dataclasses.dataclass
class InputStats:
    """What the inputs say: length histograms by (reason, rule) or KEPT, and the examples read back."""

    lengths: dict = dataclasses.field(default_factory=dict)  # (reason, rule) -> counts per LENGTH_EDGES bin
    examples: list = dataclasses.field(default_factory=list)  # [Shown]
    texts: dict = dataclasses.field(default_factory=dict)  # (file, line) -> input text, of the lines asked for

    def add_length(self, group: tuple[str, str], chars: int) -> None:
        """One document's length."""
        counts = self.lengths.get(group)
        if counts is None:
            counts = self.lengths[group] = np.zeros(len(LENGTH_EDGES), dtype=np.int64)
        counts[int(np.searchsorted(LENGTH_EDGES, chars, side="right")) - 1] += 1


class _Walk:
    """An input's lines in order beside its records (in line order): each document's length and group."""

    def __init__(self, output: Output, file_index: int, stats: InputStats, wanted: set[int], selected,
                 texts: set[int]):
        self._file_index, self._texts = file_index, texts
        self._cuts = frozenset(output.cut_reasons())
        self._records: Iterator[dict] = output.records(file_index) if output.removed is not None else iter(())
        self._next = next(self._records, None)
        self._stats, self._wanted, self._selected = stats, wanted, selected
        self._max, self._schema = max_line_bytes(output.config), schema_of(output.config)
        self._file_stats = file_stats()
        self.by_line: dict[int, list[dict]] = {}  # the wanted lines' records

    def __call__(self, line: Line) -> None:
        records = []
        while self._next is not None and self._next["line"] <= line.number:
            if self._next["line"] == line.number:
                records.append(self._next)
            self._next = next(self._records, None)
        if line.number in self._wanted:
            self.by_line[line.number] = records
        try:
            doc = validate(line, self._max, self._schema, self._file_stats)
        except BadRecord:
            return
        if line.number in self._texts:
            self._stats.texts[self._file_index, line.number] = doc.text
        if doc.subset not in self._selected or not doc.text or doc.text.isspace():
            return
        removal = [r for r in records if r["reason"] not in self._cuts]
        group = (removal[0]["reason"], rule_of(removal[0])) if removal else KEPT
        self._stats.add_length(group, len(doc.text))


def read_inputs(output: Output, records: RecordStats, texts: dict[int, set[int]] | None = None) -> InputStats:
    """One pass over each input: length histograms, `records.examples` read back and decided again.

    texts: {input file: lines} whose input texts to keep too (`InputStats.texts`).
    """
    stats = InputStats()
    replay = Replay(output.manifest) if records.examples else None
    selected = {name for name, s in output.manifest.get("subsets", {}).items() if s.get("selected", True)}
    examples: dict[int, list[dict]] = {}
    for record in records.examples:
        examples.setdefault(record["file_index"], []).append(record)
    for file_index, entry in enumerate(output.inputs):
        chosen = examples.get(file_index, [])
        wanted = {r["line"] for r in chosen}
        walk = _Walk(output, file_index, stats, wanted, selected, (texts or {}).get(file_index, set()))
        lines = read_input(entry, output.config, wanted, visit=walk)
        if chosen:
            decided = {d.line: d for d in replay.decide(file_index, entry["path"], lines, walk.by_line)}
            stats.examples += [Shown(r, decided[r["line"]], entry["path"]) for r in chosen]
    return stats
