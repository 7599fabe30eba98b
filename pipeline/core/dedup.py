"""The rules of dedup and decontamination, without Beam: input order, connected components, eval n-grams.

**Input order.** A document is identified by (file index, line number); `order_key` packs the two
into one int (file index in the high bits), so that "first in input order" is "smallest key". Every
cluster keeps its smallest key, whatever the runner or the number of workers.

**Connected components** of the candidate pairs, as Kiveris et al. (2014), "Connected Components in
MapReduce and Beyond": alternate two rounds, each a group-by-node of the edge list, until nothing
changes. With Γ(u) the neighbours of u and m(S) the smallest node of S:

- large-star(u, Γ(u)): connect every neighbour v > u to m(Γ(u) ∪ {u});
- small-star(u, N): for N = the neighbours v <= u, connect every v in N ∪ {u} to m(N ∪ {u}).

Both keep the components and only ever point a node at a smaller one; at the fixed point every
component is a star around its smallest node (`is_star_forest`). Each reducer reads its node's
neighbours twice (the minimum, then the edges out) and keeps nothing else, so a node with 100,000
neighbours costs the same memory as a node with one.

    >>> edges = {(2, 1), (3, 2), (5, 4), (4, 3), (9, 8)}
    >>> for _ in range(4):
    ...     edges = star_round(edges)
    >>> sorted(edges), is_star_forest(edges)
    ([(2, 1), (3, 1), (4, 1), (5, 1), (9, 8)], True)
    >>> sorted(components([(2, 1), (3, 2), (5, 4), (4, 3), (9, 8)]).items())
    [(2, 1), (3, 1), (4, 1), (5, 1), (9, 8)]

**Decontamination**: the eval sets' n-gram hashes, sorted, and a training document's n-grams
looked up among them; `cut_spans` gives the character spans a cut leaves out (matched n-grams,
merged).

    >>> evals = np.sort(np.array([7, 11], np.uint64))
    >>> matches(np.array([3, 11, 5, 7], np.uint64), evals).tolist()
    [1, 3]
    >>> cut_spans(np.array([[0, 3], [4, 7], [8, 11], [12, 15]]), np.array([1]), 2)
    [(4, 11)]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

LINE_BITS = 40  # lines per file < 2^40; file indices < 2^23 keep the key inside int64
REASONS = ("duplicate_exact", "duplicate_near", "contaminated")  # why a document is removed
CUT = "contaminated_cut"  # a document kept with its overlapping spans cut out


def order_key(file_index: int, line: int) -> int:
    """(file index, line) as one int ordered as the input: file first, then line."""
    if not 0 <= line < 1 << LINE_BITS or not 0 <= file_index < 1 << (63 - LINE_BITS):
        raise ValueError(f"file index {file_index} or line {line} out of range for an order key")
    return (file_index << LINE_BITS) | line


def order_parts(key: int) -> tuple[int, int]:
    """The (file index, line) of an order key."""
    return key >> LINE_BITS, key & ((1 << LINE_BITS) - 1)


def bucket_star(members: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Edges (member, smallest member) of one bucket: linear in its size, never its pairs (re-iterates `members`)."""
    smallest = min(members)
    for v in members:
        if v != smallest:
            yield v, smallest


def bucket_stars(keys: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`bucket_star` of every bucket at once: (members, their bucket's smallest member), the smallest left out.

    `keys`: each member's bucket, an int array (n,) or (n, k) whose rows are the keys; `members`:
    int64 (n,). One sort of the pairs; the same edges as `bucket_star` over each bucket.
    """
    members = np.asarray(members, np.int64)
    if not len(members):
        return members, members
    keys = np.asarray(keys).reshape(len(members), -1)
    order = np.lexsort((members, *keys.T[::-1]))  # by the key's columns, then the member
    keys, members = keys[order], members[order]
    first = np.ones(len(members), bool)
    first[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    smallest = members[first][np.cumsum(first) - 1]
    edge = members != smallest
    return members[edge], smallest[edge]


def large_star(u: int, neighbours: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Kiveris' large-star at node u: (v, m(Γ(u) ∪ {u})) for every neighbour v > u (re-iterates `neighbours`)."""
    m = min(min(neighbours, default=u), u)
    for v in neighbours:
        if v > u:
            yield v, m


def small_star(u: int, smaller: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Kiveris' small-star at node u with its neighbours v <= u: (v, m) for v in N ∪ {u}, v != m."""
    m = min(min(smaller, default=u), u)
    if u != m:
        yield u, m
    for v in smaller:
        if v != m:
            yield v, m


def large_star_map(edge: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """Both directions of an edge: large-star groups by either end."""
    u, v = edge
    yield u, v
    yield v, u


def small_star_map(edge: tuple[int, int]) -> tuple[int, int]:
    """An edge keyed by its larger end: small-star groups each node with its smaller neighbours."""
    u, v = edge
    return (u, v) if v <= u else (v, u)


def _grouped(pairs: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for k, v in pairs:
        groups.setdefault(k, []).append(v)
    return groups


def star_round(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """One large-star then one small-star round over a set of edges, in memory (the reference for the Beam rounds)."""
    large = {e for u, vs in _grouped(p for e in edges for p in large_star_map(e)).items() for e in large_star(u, vs)}
    return {e for u, vs in _grouped(small_star_map(e) for e in large).items() for e in small_star(u, vs)}


def is_star_forest(edges: Iterable[tuple[int, int]]) -> bool:
    """True when every node has at most one parent, smaller than itself, and no parent has a parent."""
    parents: dict[int, int] = {}
    for child, parent in edges:
        if parent >= child or parents.setdefault(child, parent) != parent:
            return False
    return not any(p in parents for p in parents.values())


def components(edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Each node of an edge list (but each component's smallest) -> its component's smallest node: union-find."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find(x) for x in list(parent) if find(x) != x}


def matches(grams: np.ndarray, evals: np.ndarray) -> np.ndarray:
    """Positions of the n-gram hashes `grams` found in the sorted array `evals`."""
    if len(evals) == 0 or len(grams) == 0:
        return np.empty(0, np.int64)
    at = np.minimum(np.searchsorted(evals, grams), len(evals) - 1)
    return np.flatnonzero(evals[at] == grams)


def cut_spans(word_spans: np.ndarray, positions: np.ndarray, n: int) -> list[tuple[int, int]]:
    """Character spans covered by the n-grams starting at word `positions` (`word_spans`: each word's (start, end))."""
    spans: list[tuple[int, int]] = []
    last = len(word_spans) - 1
    for p in sorted(int(p) for p in positions):
        start, end = int(word_spans[p, 0]), int(word_spans[min(p + n - 1, last), 1])
        if spans and start <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def cut_text(text: str, spans: list[tuple[int, int]]) -> str:
    """The text without the given (start, end) character spans."""
    out, at = [], 0
    for start, end in spans:
        out.append(text[at:start])
        at = end
    out.append(text[at:])
    return "".join(out)
