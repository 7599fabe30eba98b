"""Which removed/ records to show: by reason, rule and subset, and a reproducible sample of them.

A sample keeps the records with the smallest seeded hashes of their identity (file, line, reason,
rule): the same seed gives the same records whatever order they are read in, and a larger sample
holds a smaller one. It is taken in one pass with a bounded heap.

    >>> records = [{"file_index": 0, "line": n, "reason": "r", "rule": "x"} for n in range(1, 100)]
    >>> sample(records, 3, seed=1) == sample(list(reversed(records)), 3, seed=1)
    True
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable

from pipeline.core.hashing import stable_hash
from pipeline.core.options import UsageError, suggest
from pipeline.inspect.output import rule_of


@dataclasses.dataclass(frozen=True)
class Selection:
    """Records of these reasons, rules and subsets (an empty set: any)."""

    reasons: frozenset = frozenset()
    rules: frozenset = frozenset()
    subsets: frozenset = frozenset()

    def matches(self, record: dict) -> bool:
        """Whether the record is one of those selected."""
        return ((not self.reasons or record["reason"] in self.reasons)
                and (not self.rules or rule_of(record) in self.rules)
                and (not self.subsets or record["subset"] in self.subsets))

    def describe(self) -> str:
        """The flags that made it, for a message."""
        parts = [f"--{flag} {value}" for flag, values in (("reason", self.reasons), ("rule", self.rules),
                                                          ("subset", self.subsets)) for value in sorted(values)]
        return " ".join(parts) or "(every record)"


def check_known(flag: str, given: Iterable[str], known: Iterable[str]) -> None:
    """UsageError naming the flag when a value given is none the output has, with the close ones."""
    known = sorted(set(known))
    for value in sorted(given):
        if value not in known:
            raise UsageError(f"--{flag} {value!r}: no removed record of this output has it{suggest(value, known)} "
                             f"(its values: {', '.join(known) or 'none'})")


def sample_key(record: dict, seed: int) -> int:
    """The record's place in every sample of this seed."""
    return stable_hash(seed, record["file_index"], record["line"], record["reason"], rule_of(record))


class Sampler:
    """Records fed one by one; `chosen()`: the `n` (`per_rule`: of each reason and rule) of smallest seeded hash."""

    def __init__(self, n: int, seed: int, per_rule: bool = False):
        self.n, self.seed, self.per_rule = n, seed, per_rule
        self._heaps: dict = {}

    def add(self, record: dict) -> None:
        """Consider one record."""
        heap = self._heaps.setdefault((record["reason"], rule_of(record)) if self.per_rule else None, [])
        # a max-heap of the kept hashes (negated): the largest is replaced by a smaller one
        key = (-sample_key(record, self.seed), record["file_index"], record["line"], record["reason"], rule_of(record))
        if len(heap) < self.n:
            heapq.heappush(heap, (key, _Wrapped(record)))
        elif key > heap[0][0]:
            heapq.heapreplace(heap, (key, _Wrapped(record)))

    def chosen(self) -> list[dict]:
        """The records chosen, in (file, line, reason, rule) order."""
        out = [item[1].record for heap in self._heaps.values() for item in heap]
        return sorted(out, key=lambda r: (r["file_index"], r["line"], r["reason"], rule_of(r)))


def sample(records: Iterable[dict], n: int, seed: int, per_rule: bool = False) -> list[dict]:
    """`n` records (`per_rule`: of each reason and rule) by seeded hash, in (file, line) order."""
    sampler = Sampler(n, seed, per_rule)
    for record in records:
        sampler.add(record)
    return sampler.chosen()


class _Wrapped:
    """A record in a heap item, never compared (the item's first fields always differ)."""

    __slots__ = ("record",)

    def __init__(self, record: dict):
        self.record = record

    def __lt__(self, other) -> bool:
        return False
