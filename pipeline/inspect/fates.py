"""Two runs of the same inputs: the documents whose fate differs, counted by the pair of fates.

A fate differs when a rule removed the document in one run and it was kept, or removed by another
rule, in the other; a few documents of each pair of fates are sampled to show.

The records of both runs are walked input by input in line order, side by side (removed/'s own order),
so memory holds the counts and the samples only. A document's fate in a run is the rule that removed
it, or kept (a cut document is kept). Only runs whose inputs are the same files (path, lines, size, as
the manifests record them) are compared: a line number means the same document in both.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Iterator

from pipeline.core.hashing import stable_hash
from pipeline.inspect.output import Output, rule_of

KEPT = None  # a document no rule removed


def same_inputs(a: Output, b: Output) -> str | None:
    """Why the two runs' documents cannot be compared line by line, or None when they can."""
    def key(output: Output):
        return [(e.get("path"), e.get("lines"), e.get("decompressed_bytes")) for e in output.inputs]

    if key(a) != key(b):
        return "their inputs are not the same files (paths, line counts and sizes as the manifests record them)"
    if a.removed is None and b.removed is None:
        return "neither run removed anything"
    return None


def _removals(output: Output, file_index: int, cuts: set) -> Iterator[tuple[int, tuple | None, dict]]:
    """(line, (reason, rule), record) of each document the run removed from one input, in line order."""
    if output.removed is None:
        return
    for record in output.records(file_index):
        if record["reason"] not in cuts:
            yield record["line"], (record["reason"], rule_of(record)), record


@dataclasses.dataclass
class Fates:
    """Documents by (fate in the first run, fate in the second), those that differ; `examples` of each."""

    counts: Counter = dataclasses.field(default_factory=Counter)
    examples: dict = dataclasses.field(default_factory=dict)  # (fate a, fate b) -> [(file, line, rec a, rec b)]


def fates(a: Output, b: Output, examples: int, seed: int) -> Fates:
    """Compare the two runs' removals document by document (`same_inputs` must hold)."""
    out = Fates()
    heaps: dict = {}
    cuts = a.cut_reasons() | b.cut_reasons()
    for file_index in range(len(a.inputs)):
        left, right = _removals(a, file_index, cuts), _removals(b, file_index, cuts)
        x, y = next(left, None), next(right, None)
        while x is not None or y is not None:
            line = min(item[0] for item in (x, y) if item is not None)
            fa, ra = (x[1], x[2]) if x is not None and x[0] == line else (KEPT, None)
            fb, rb = (y[1], y[2]) if y is not None and y[0] == line else (KEPT, None)
            if ra is not None:
                x = next(left, None)
            if rb is not None:
                y = next(right, None)
            if fa == fb:
                continue
            out.counts[fa, fb] += 1
            heap = heaps.setdefault((fa, fb), [])
            item = (-stable_hash(seed, file_index, line), file_index, line)
            if len(heap) < examples:
                heapq.heappush(heap, (item, ra, rb))
            elif examples and item > heap[0][0]:
                heapq.heapreplace(heap, (item, ra, rb))
    for pair, heap in heaps.items():
        out.examples[pair] = sorted((i[1], i[2], ra, rb) for i, ra, rb in heap)
    return out


def wanted_lines(found: Fates) -> dict[int, set[int]]:
    """{input file: lines} of the examples, to read back."""
    out: dict[int, set[int]] = {}
    for items in found.examples.values():
        for file_index, line, _, _ in items:
            out.setdefault(file_index, set()).add(line)
    return out
