"""Near dedup: band keys -> bucket stars -> connected components (star rounds) -> clusters -> removed records.

`near_dedup` wires the steps (pipeline/beam/dedup/transform.py's `Dedup` calls it); see that module's
docstring for the stages in order and the memory they need.
"""

from __future__ import annotations

import pickle
import typing

import apache_beam as beam
import numpy as np

from pipeline.beam.dedup.records import KEPT, REMOVED, Records, counter
from pipeline.beam.dedup.sign import BatchingFn, batching
from pipeline.beam.graph import EVERY_FEATURE, Runtime, multi_output
from pipeline.core import dedup, minhash

_CLUSTER, _EXACT = "cluster", "exact"


class _BucketPairsFn(BatchingFn):
    """Signed documents -> (partition, packed (bucket, document) pairs): the buckets' group in few elements.

    Input: (key, (doc, sig)), or with `exact` (exact key, (key, doc, sig)). Each document's band keys
    (minhash.band_key_ints) and its exact key go to partition `key % partitions` as packed int64
    arrays: one element per partition and batch of BATCH_DOCS documents instead of one per key and
    document, whose cost is per element on every runner. `_BucketStarsFn` sorts a partition's pairs.
    """

    BATCH_DOCS = 4096

    def __init__(self, bands: int, rows: int, partitions: int, exact: bool):
        self._bands, self._rows, self._partitions, self._exact_input = bands, rows, partitions, exact

    def _reset(self):
        self._band_keys: list[int] = []
        self._band_docs: list[int] = []
        self._exact_keys: list[bytes] = []
        self._exact_docs: list[int] = []
        self._count = 0

    def _add(self, element) -> bool:
        if self._exact_input:
            exact, (key, _, sig) = element
            self._exact_keys.append(exact)
            self._exact_docs.append(key)
        else:
            key, (_, sig) = element
        if sig is not None:
            bands = minhash.band_key_ints(np.frombuffer(sig, np.uint32), self._bands, self._rows)
            self._band_keys += bands
            self._band_docs += [key] * len(bands)
        self._count += 1
        return self._count >= self.BATCH_DOCS

    def _flush(self):
        bands = np.array(self._band_keys, np.int64)
        band_docs = np.array(self._band_docs, np.int64)
        exact = np.frombuffer(b"".join(self._exact_keys), np.int64).reshape(-1, 2)  # 16-byte keys
        exact_docs = np.array(self._exact_docs, np.int64)
        self._reset()
        # Each kind's pairs sorted by partition once, then cut where the partition changes.
        parts = np.uint64(self._partitions)
        bands, band_docs, band_at = _by_partition(bands.view(np.uint64) % parts, bands, band_docs)
        exact, exact_docs, exact_at = _by_partition(exact[:, 0].view(np.uint64) % parts, exact, exact_docs)
        for part in sorted(band_at.keys() | exact_at.keys()):
            b, e = band_at.get(part, slice(0, 0)), exact_at.get(part, slice(0, 0))
            yield part, (bands[b].tobytes(), band_docs[b].tobytes(), exact[e].tobytes(), exact_docs[e].tobytes())


def _by_partition(part: np.ndarray, keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """`keys` and `docs` in partition order, and each partition's slice of them."""
    order = np.argsort(part, kind="stable")
    part = part[order]
    cuts = np.flatnonzero(part[1:] != part[:-1]) + 1
    starts, ends = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(part)]))
    at = {int(part[a]): slice(int(a), int(b)) for a, b in zip(starts, ends, strict=True) if b > a}
    return keys[order], docs[order], at


@beam.typehints.with_output_types(typing.Any)  # a tagged output beside the main one
class _BucketStarsFn(beam.DoFn):
    """(partition, packed pairs) -> edges (member, its bucket's first member); exact buckets' on EXACT.

    A partition's pairs are sorted at once (`dedup.bucket_stars`): memory of 16 bytes a pair, and
    a bucket is never split between partitions. An exact duplicate's edge goes to its twin (it is
    removed as `duplicate_exact` of the first document with its text) and joins the near components.
    """

    def process(self, element):
        _, parts = element
        bands, band_docs, exact, exact_docs = ([np.frombuffer(part[i], np.int64) for part in parts] for i in range(4))
        none = np.zeros(0, np.int64)
        members, firsts = dedup.bucket_stars(np.concatenate(bands or [none]), np.concatenate(band_docs or [none]))
        yield from zip(members.tolist(), firsts.tolist(), strict=True)
        members, firsts = dedup.bucket_stars(np.concatenate(exact or [none]).reshape(-1, 2),
                                             np.concatenate(exact_docs or [none]))
        for edge in zip(members.tolist(), firsts.tolist(), strict=True):
            yield beam.pvalue.TaggedOutput(_EXACT, edge)


class _JoinOneFn(beam.DoFn):
    """(k, tagged values): the one ("one", x) of the key joined to each ("many", y): (y, (k, x)); O(1) memory."""

    def process(self, element):
        k, values = element
        one = next((x for tag, x in values if tag == "one"), None)
        if one is None:
            return
        for tag, y in values:
            if tag == "many":
                yield y, (k, one)


class JoinOne(beam.PTransform):
    """(k, x) once per k, and (k, y) many times -> (y, (k, x)) for each y, streaming the many (no list of them)."""

    def __init__(self, many):
        super().__init__()
        self._many = many

    def expand(self, one):
        return ((one | "TagOne" >> beam.MapTuple(lambda k, x: (k, ("one", x))),
                 self._many | "TagMany" >> beam.MapTuple(lambda k, y: (k, ("many", y))))
                | "Both" >> beam.Flatten() | "Group" >> beam.GroupByKey() | "Join" >> beam.ParDo(_JoinOneFn()))


class CheckedEdges(beam.PTransform):
    """Candidate edges (child, parent) -> those whose true Jaccard >= threshold (shingles joined to both ends)."""

    def __init__(self, shingles, threshold: float):
        super().__init__()
        self._shingles, self._threshold = shingles, threshold

    def expand(self, edges):
        # (parent, child) -> (child, (parent, parent's shingles))
        by_parent = edges | "ByParent" >> beam.MapTuple(lambda c, p: (p, c))
        with_parent = self._shingles | "ParentShingles" >> JoinOne(by_parent)
        # (child, shingles) one, (child, (parent, parent's shingles)) many -> ((parent, sh_p), (child, sh_c))
        both = self._shingles | "ChildShingles" >> JoinOne(with_parent)
        threshold = self._threshold
        return both | "KeepSimilar" >> beam.FlatMap(lambda e: _keep_similar(e, threshold))


def _keep_similar(element, threshold: float):
    (parent, parent_shingles), (child, child_shingles) = element
    a, b = np.frombuffer(child_shingles, np.uint64), np.frombuffer(parent_shingles, np.uint64)
    if minhash.jaccard(a, b) >= threshold:
        yield child, parent


class StarRound(beam.PTransform):
    """One large-star and one small-star round over edges (u, v): the same components, nearer to stars.

    No Distinct: each star's output edges, as a set, depend only on the set of its input edges, and
    each emits at most one edge per input edge (large-star: one per edge, at its smaller end;
    small-star: at most one per edge it groups). So repeats never add up over the rounds (no more
    elements than the rounds' first input: the bucket stars' edges, made distinct, and one edge per
    exact duplicate, which a band's bucket may give too), the rounds give the same edge set as with
    a Distinct after each, and every reader of the result takes a repeated edge as one
    (`tests/test_dedup.py` checks both against the set-based reference).
    """

    def expand(self, edges):
        # Each star's edges keyed for the next group in the same step: fewer steps on every runner.
        return (edges
                | "LargeMap" >> beam.FlatMap(dedup.large_star_map)
                | "LargeGroup" >> beam.GroupByKey()
                | "LargeStar" >> beam.FlatMapTuple(_large_star_keyed)
                | "SmallGroup" >> beam.GroupByKey()
                | "SmallStar" >> beam.FlatMapTuple(dedup.small_star))


def _large_star_keyed(u, neighbours):
    """Large-star's edges at u, each keyed by its larger end for the small-star group."""
    for edge in dedup.large_star(u, neighbours):
        yield dedup.small_star_map(edge)


def _star_ends(child: int, parent: int):
    """Both ends of a star edge, tagged: the check step groups each node with its parent and children."""
    yield child, ("child_of", parent)
    yield parent, ("parent_of", child)


class _CheckStarFn(beam.DoFn):
    """Per node: at most one parent, and not both a parent and a child; else the rounds did not converge.

    Emits (member, ("root", its component's first)) and (first, ("is_root", None)), once per node.
    """

    def __init__(self, rounds: int):
        self._rounds = rounds

    def process(self, element):
        node, values = element
        parent, has_child = None, False
        for tag, other in values:
            if tag == "child_of":
                if parent is not None and other != parent:
                    raise RuntimeError(self._message(node))
                parent = other
            else:
                has_child = True
        if parent is not None and has_child:
            raise RuntimeError(self._message(node))
        if parent is not None:
            yield node, ("root", parent)
        elif has_child:  # a component's first document: its signature is its members' twin's
            yield node, ("is_root", None)

    def _message(self, node: int) -> str:
        file_index, line = dedup.order_parts(node)
        return (f"near dedup: the clusters' connected components did not converge in rounds={self._rounds} "
                f"(file {file_index} line {line} still has two parents); raise rounds")


BLOCK_BITS = 10  # the near group's key: a block of 1,024 consecutive lines of one file


def _block_tag(element):
    """(key, (tag, value)) -> (its block, ("tag", (key, tag, value)))."""
    key, (tag, value) = element
    return key >> BLOCK_BITS, ("tag", (key, tag, value))


class _DocBlocksFn(BatchingFn):
    """(key, (doc, sig)) -> (block, ("docs", pickled [(key, doc, sig), ...])): the near group's documents, in blocks.

    One element per block of lines seen in a batch instead of one per document: the near group
    then moves a few hundred elements for a corpus's documents, whose cost is per element on every
    runner. A batch holds at most BATCH_DOCS documents; the last one goes as the bundle finishes.
    """

    BATCH_DOCS = 4096

    def _reset(self):
        self._blocks: dict[int, list] = {}
        self._count = 0

    def _add(self, element) -> bool:
        key, (doc, sig) = element
        self._blocks.setdefault(key >> BLOCK_BITS, []).append((key, doc, sig))
        self._count += 1
        return self._count >= self.BATCH_DOCS

    def _flush(self):
        blocks = self._blocks
        self._reset()
        for block, docs in blocks.items():
            # One bytes value: each step the group crosses copies it whole instead of coding each field.
            yield block, ("docs", pickle.dumps(docs, protocol=pickle.HIGHEST_PROTOCOL))


class NearFn(beam.DoFn):
    """(block, [("docs", pickled [(key, doc, sig), ...]) | ("tag", (key, tag, value))]) -> each doc kept; CLUSTER.

    CLUSTER: (root, ("member", key, doc, sig)) for each document of a component but its first, and
    (root, ("root", sig)) for the first: only the components' documents go on to `ClusterFn`.
    With exact dedup in the same buckets, a document tagged ("exact", twin) is an exact duplicate of
    that earlier one: its `duplicate_exact` record on REMOVED, whatever its component. The block's
    tags are read first (a few per document of a component, of at most 1,024 lines), then its
    documents.
    """

    def __init__(self, records: Records | None = None):
        self._records = records
        self._exact = counter("duplicate_exact")

    def process(self, element):
        _, values = element
        tags: dict[int, dict] = {}
        for kind, value in values:
            if kind == "tag":
                key, tag, other = value
                tags.setdefault(key, {})[tag] = other
        for kind, value in values:
            if kind != "docs":
                continue
            for key, doc, sig in pickle.loads(value):
                yield from self._document(key, doc, sig, tags.get(key, {}))

    def _document(self, key: int, doc: dict, sig, tags: dict):
        if "exact" in tags:
            self._exact.inc()
            yield beam.pvalue.TaggedOutput(REMOVED, self._records.record(key, doc, "duplicate_exact", 1.0,
                                                                         twin=tags["exact"]))
            return
        if "root" in tags:
            yield beam.pvalue.TaggedOutput(_CLUSTER, (tags["root"], ("member", key, doc, sig)))
            return
        if "is_root" in tags:
            yield beam.pvalue.TaggedOutput(_CLUSTER, (key, ("root", sig)))
        yield key, doc


class ClusterFn(beam.DoFn):
    """(root, [("root", sig), ("member", key, doc, sig), ...]) -> a `duplicate_near` record per member.

    The similarity is MinHash's estimate against the root. The group is read twice (the root's
    signature, then the members), one element at a time: a cluster of 100,000 copies costs a pair's memory.
    """

    def __init__(self, records: Records):
        self._records = records
        self._removed = counter("duplicate_near")

    def process(self, element):
        root_key, values = element
        roots = [value[1] for value in values if value[0] == "root"]
        root = None
        for value in values:
            if value[0] == "member":
                if root is None:
                    # (A component of a text without words holds only its exact duplicates: no members.)
                    if not roots or roots[0] is None:
                        raise RuntimeError(f"near dedup: the first document of a cluster has no signature ({root_key})")
                    root = np.frombuffer(roots[0], np.uint32)
                _, key, doc, sig = value
                self._removed.inc()
                yield self._records.record(key, doc, "duplicate_near",
                                           minhash.estimate_jaccard(np.frombuffer(sig, np.uint32), root),
                                           twin=root_key)


def near_dedup(docs, shingles, bands: int, rows: int, partitions: int, jaccard_threshold: float | None,
               rounds: int, records: Records, exact: bool = False, runtime: Runtime = EVERY_FEATURE):
    """(key, (doc, sig)) -> (kept (key, doc), duplicate_near records).

    With `exact`, `docs` are (exact key, (key, doc, sig)) and the exact keys are buckets of the
    same group as the bands' (one shuffle fewer than an exact group before it): a duplicate's
    only edge that matters is to its twin (its bands' buckets hold its twin too), so the
    components of the other documents, their first documents and so every record are those of
    exact dedup followed by near dedup on its survivors; the records then include the
    `duplicate_exact` ones. `runtime`: what the runner does (pipeline/beam/graph.py).
    """
    pairs = batching(_BucketPairsFn(bands, rows, partitions, exact), runtime)
    stars = multi_output(docs | "BucketPairs" >> beam.ParDo(pairs) | "BucketGroup" >> beam.GroupByKey(),
                         "BucketStars", _BucketStarsFn(), _EXACT, main="edges", runtime=runtime)
    if exact:
        docs = docs | "Docs" >> beam.Map(lambda element: (element[1][0], element[1][1:]))
    # (member, the bucket's first member)
    edges = stars.edges | "DistinctEdges" >> beam.Distinct()
    if jaccard_threshold is not None:
        edges = edges | "TrueJaccard" >> CheckedEdges(shingles, jaccard_threshold)
    if exact:  # an exact duplicate's edge to its twin: distinct already (one exact bucket each), no check
        edges = (edges, stars[_EXACT]) | "WithExact" >> beam.Flatten()
    for i in range(rounds):
        edges = edges | f"StarRound{i}" >> StarRound()
    # (member, ("root", its component's first)), (first, ("is_root", None))
    roots = (edges
             | "StarEnds" >> beam.FlatMapTuple(_star_ends)
             | "StarGroup" >> beam.GroupByKey()
             | "CheckStars" >> beam.ParDo(_CheckStarFn(rounds)))
    tags = [roots]
    if exact:
        tags.append(stars[_EXACT] | "TagExact" >> beam.MapTuple(lambda member, twin: (member, ("exact", twin))))
    parts = [docs | "DocBlocks" >> beam.ParDo(batching(_DocBlocksFn(), runtime)),
             tags | "Tags" >> beam.Flatten() | "TagBlocks" >> beam.Map(_block_tag)]
    out = multi_output(parts | "NearParts" >> beam.Flatten() | "NearGroup" >> beam.GroupByKey(), "Near",
                       NearFn(records), _CLUSTER, REMOVED, main=KEPT, runtime=runtime)
    # Only the clusters' documents: (root, their signatures and fields) -> the removed records.
    removed = (out[_CLUSTER]
               | "ClusterGroup" >> beam.GroupByKey()
               | "Similarity" >> beam.ParDo(ClusterFn(records)))
    if exact:
        removed = (removed, out[REMOVED]) | "NearAndExact" >> beam.Flatten()
    return out[KEPT], removed
