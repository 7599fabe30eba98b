"""Dedup and decontamination as one composite PTransform on Beam's shuffle: exact, near (MinHash LSH), eval n-grams.

Input: a PCollection of documents `((file_index, line), doc)`, `doc` a dict with "text" and
"subset" (and any small fields to carry, e.g. the chunk index: copied into a removed record).
`Dedup(...)` returns a dict of three PCollections:

- "kept":    `((file_index, line), doc)` of every document kept (with --cut, its text cut);
- "removed": one dict per removed (or cut) document: file_index, line, subset, reason, the twin's
             file_index and line (a duplicate) or the eval file and the matching n-gram (contaminated),
             the similarity (duplicates: MinHash's estimate against the twin; contaminated: the share
             of the document's n-grams found in the eval sets), "tokens" with a token counter;
- "counts":  one dict per subset: documents, kept, removed by reason (documents and tokens), cut;
             so that kept + removed = documents, checked by the job with its dead letters.
With `removed_only` (the job's case) only "removed" is made and returned.

Stages, in order (each optional), every survivor the first document in input order:

1. Decontaminate: the eval files' n-gram hashes, sorted, are a side input (bounded by
   `max_eval_ngrams`: 8 bytes plus 2 for the file each); a document with any of them is removed.
2. Sign: each document's text read once for its exact key (blake2b-128 of the normalized text)
   and MinHash signature; what goes on is the key, the document's other fields (its text too only
   with `keep_text`) and the signature, so that neither group below moves the text.
3. Exact: group by the exact key; the smallest (file, line) stays.
4. Near: the survivors' signatures -> band keys; group by band key (packed in partitions, each
   sorted at once): each bucket gives the star of edges (member, the bucket's first member), never
   its pairs; optionally keep only edges whose true
   Jaccard reaches `jaccard_threshold`; then `rounds` large-star/small-star rounds (Kiveris et al.
   2014) turn the edges into stars around each component's first document, and a last step checks
   that they did (an error names `rounds` otherwise). Every other member is removed, its twin the
   component's first document.
   With both, steps 3 and 4 share one group: the exact key is one more bucket beside the bands'
   (`Dedup._near`), with the same records as exact dedup followed by near dedup on its survivors.

Memory per worker: the buckets' pairs are grouped by partition, packed (16 bytes a pair, a bucket
never split), and one partition's are sorted at a time: a bucket of 100,000 copies costs 1.6 MB
there. Every other reducer reads its group twice (the smallest key, then the output) and holds one
element at a time, so a cluster of 100,000 copies costs what a pair does (beyond what the runner
itself buffers for a group: DirectRunner holds a group in memory, Dataflow and Flink stream it).
tests/test_dedup_beam.py measures it.
"""

# One module over 400 lines on purpose: the three stages share the tagged-union joins and the
# two-pass reducers that keep memory bounded, and the composite wires them in one `expand`; the
# algorithms themselves are pure functions in pipeline/core/ (dedup, minhash, ngrams).

from __future__ import annotations

import pickle
import typing
from collections.abc import Callable

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.core import dedup, minhash, ngrams
from pipeline.io.eval_sets import eval_ngrams

KEPT, REMOVED, COUNTS = "kept", "removed", "counts"
_SIGS, _SHINGLES, _CLUSTER, _EXACT = "sigs", "shingles", "cluster", "exact"


def _counter(name: str):
    return beam.metrics.Metrics.counter("dedup", name)


class _Records:
    """Builds removed records: names, carried fields, tokens."""

    def __init__(self, file_names: list[str] | None, token_count: Callable[[str], int] | None):
        self._names = file_names
        self._tokens = token_count

    def record(self, key: int, doc: dict, reason: str, similarity: float, twin: int | None = None, **extra) -> dict:
        file_index, line = dedup.order_parts(key)
        rec = {k: v for k, v in doc.items() if k != "text"}
        rec.update(file_index=file_index, line=line, subset=doc["subset"], reason=reason,
                   similarity=round(float(similarity), 4))
        if self._names is not None:
            rec["file"] = self._names[file_index]
        if twin is not None:  # the kept document it duplicates
            t_file, t_line = dedup.order_parts(twin)
            rec.update(twin_file_index=t_file, twin_line=t_line)
            if self._names is not None:
                rec["twin_file"] = self._names[t_file]
        rec.update(extra)
        if self._tokens is not None:
            rec["tokens"] = int(self._tokens(doc["text"]))
        return rec


def _to_order(element):
    (file_index, line), doc = element
    return dedup.order_key(file_index, line), doc


def _from_order(element):
    key, doc = element
    return dedup.order_parts(key), doc


# -- decontamination ---------------------------------------------------------------------------------


class _EvalNgramsFn(beam.CombineFn):
    """(eval file index, hashes) -> (sorted distinct hashes, the first eval file of each), bounded."""

    def __init__(self, max_ngrams: int):
        self._max = max_ngrams

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, element):
        accumulator.append(element)
        return self._bounded(accumulator)

    def merge_accumulators(self, accumulators):
        return self._bounded([part for acc in accumulators for part in acc])

    def _bounded(self, parts):
        total = sum(len(h) for _, h in parts)
        if total > self._max:
            raise ValueError(f"the eval files hold {total:,} distinct n-grams, more than max_eval_ngrams "
                             f"({self._max:,}); raise it (10 bytes each on every worker)")
        return parts

    def extract_output(self, accumulator):
        if not accumulator:
            return np.empty(0, np.uint64), np.empty(0, np.uint16)
        hashes = np.concatenate([h for _, h in accumulator])
        files = np.concatenate([np.full(len(h), i, np.uint16) for i, h in accumulator])
        order = np.lexsort((files, hashes))
        hashes, files = hashes[order], files[order]
        first = np.ones(len(hashes), bool)
        first[1:] = hashes[1:] != hashes[:-1]
        return hashes[first], files[first]


class DecontaminateFn(beam.DoFn):
    """(key, doc) -> kept (key, doc), or a `contaminated` record; with cut, the doc kept without the spans."""

    def __init__(self, n: int, cut: bool, eval_files: list[str], records: _Records):
        self._n, self._cut, self._eval_files, self._records = n, cut, eval_files, records
        self._removed = _counter("contaminated")

    def process(self, element, evals):
        key, doc = element
        hashes, files = evals
        tokens, spans = ngrams.word_spans(doc["text"])
        grams = ngrams.ngram_hashes(ngrams.word_hashes(tokens), self._n) if len(tokens) >= self._n else np.empty(0)
        found = dedup.matches(grams.astype(np.uint64), hashes)
        if len(found) == 0:
            yield element
            return
        first = int(found[0])
        at = int(np.searchsorted(hashes, grams[first]))
        evidence = {"eval_file": self._eval_files[int(files[at])], "ngram": " ".join(tokens[first : first + self._n])}
        share = len(found) / len(grams)
        if self._cut:
            cuts = dedup.cut_spans(spans, found, self._n)
            yield beam.pvalue.TaggedOutput(REMOVED, self._records.record(key, doc, dedup.CUT, share, spans=cuts,
                                                                         **evidence))
            yield key, {**doc, "text": dedup.cut_text(doc["text"], cuts)}
            return
        self._removed.inc()
        yield beam.pvalue.TaggedOutput(REMOVED, self._records.record(key, doc, "contaminated", share, **evidence))


# -- exact -------------------------------------------------------------------------------------------


class ExactFn(beam.DoFn):
    """(text hash, [(key, doc, sig), ...]) -> the first (key, (doc, sig)) kept; every other a `duplicate_exact` one."""

    def __init__(self, records: _Records):
        self._records = records
        self._removed = _counter("duplicate_exact")

    def process(self, element):
        _, group = element
        first = min(key for key, _, _ in group)
        for key, doc, sig in group:
            if key == first:
                yield key, (doc, sig)
            else:
                self._removed.inc()
                yield beam.pvalue.TaggedOutput(REMOVED, self._records.record(key, doc, "duplicate_exact", 1.0,
                                                                             twin=first))


# -- near --------------------------------------------------------------------------------------------


class _BatchingFn(beam.DoFn):
    """A DoFn that gathers its input and emits it per batch.

    `_add` says when a batch is full, `_flush` emits it and starts the next; the last one goes as
    the bundle finishes, in the global window (the only one Dedup reads).
    """

    def start_bundle(self):
        self._reset()

    def process(self, element):
        if self._add(element):
            yield from self._flush()

    def finish_bundle(self):
        for out in self._flush():
            yield GlobalWindows.windowed_value(out)

    def _reset(self) -> None:
        raise NotImplementedError

    def _add(self, element) -> bool:
        raise NotImplementedError

    def _flush(self):
        raise NotImplementedError


@beam.typehints.with_output_types(typing.Any)  # a tagged output beside the main one: no key-value hint to infer
class SignFn(_BatchingFn):
    """(key, doc) -> (exact key, (key, doc, signature bytes)), SHINGLES (key, bytes) if asked; the text read once.

    The doc goes on without its text unless `keep_text`, so that the exact and near groups shuffle
    keys, small fields and signatures only. The exact key is None without exact dedup, the
    signature None without near dedup or for a text without words (only exact dedup can match it).
    Without shingles the documents are signed in batches (`Signer.sign_many`: one compiled call
    without the GIL per batch, so that DirectRunner's worker threads sign in parallel); a batch is
    bounded by BATCH_CHARS of text and BATCH_DOCS documents, and the last one is signed as the
    bundle finishes. The job runs in the global window, which is what those are emitted in.
    """

    BATCH_CHARS = 1 << 22
    BATCH_DOCS = 2048

    def __init__(self, exact: str | None, ngram: int | None, num_perm: int, seed: int, shingles: bool,
                 keep_text: bool):
        self._exact, self._ngram, self._shingles, self._keep = exact, ngram, shingles, keep_text
        self._num_perm, self._seed = num_perm, seed
        self._reset()

    def setup(self):
        # Imported here, not with this module: numba (when installed) loads only in workers that sign.
        from pipeline.core import minhash_kernel

        # Compiled kernels where numba is installed, the numpy definitions otherwise: the same values.
        self._signer = minhash_kernel.Signer(self._exact, self._ngram, self._num_perm, self._seed)

    def process(self, element):
        if self._shingles:
            yield from self._one(element)
        else:
            yield from super().process(element)

    def _reset(self):
        self._batch, self._chars = [], 0

    def _add(self, element) -> bool:
        self._batch.append(element)
        self._chars += len(element[1]["text"])
        return self._chars >= self.BATCH_CHARS or len(self._batch) >= self.BATCH_DOCS

    def _flush(self):
        batch = self._batch
        self._reset()
        if not batch:
            return
        for (key, doc), (exact, sig) in zip(batch, self._signer.sign_many([doc["text"] for _, doc in batch]),
                                            strict=True):
            yield exact, (key, self._fields(doc), None if sig is None else sig.tobytes())

    def _one(self, element):
        key, doc = element
        exact, grams, sig = self._signer.sign(doc["text"])
        if sig is not None:
            sig = sig.tobytes()
            # A repeated n-gram does not change a minimum: the signature needs no np.unique, the
            # true Jaccard check (the shingles' output) does.
            yield beam.pvalue.TaggedOutput(_SHINGLES, (key, np.unique(grams).tobytes()))
        yield exact, (key, self._fields(doc), sig)

    def _fields(self, doc: dict) -> dict:
        return doc if self._keep else {n: v for n, v in doc.items() if n != "text"}


class _BucketPairsFn(_BatchingFn):
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


class _DocBlocksFn(_BatchingFn):
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

    def __init__(self, records: _Records | None = None):
        self._records = records
        self._exact = _counter("duplicate_exact")

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

    def __init__(self, records: _Records):
        self._records = records
        self._removed = _counter("duplicate_near")

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


# -- counts ------------------------------------------------------------------------------------------


class CountsFn(beam.CombineFn):
    """(subset, what, tokens) -> {subset: {documents, kept, removed: {reason: n}, removed_tokens, cut}}."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, element):
        subset, what, tokens = element
        s = accumulator.setdefault(subset, {"documents": 0, "kept": 0, "cut": 0, "removed": {}, "removed_tokens": {},
                                            "tokens": 0, "kept_tokens": 0})
        if what == "documents":
            s["documents"] += 1
            s["tokens"] += tokens
        elif what == "kept":
            s["kept"] += 1
            s["kept_tokens"] += tokens
        elif what == dedup.CUT:
            s["cut"] += 1
        else:
            s["removed"][what] = s["removed"].get(what, 0) + 1
            s["removed_tokens"][what] = s["removed_tokens"].get(what, 0) + tokens
        return accumulator

    def merge_accumulators(self, accumulators):
        out: dict = {}
        for acc in accumulators:
            for subset, s in acc.items():
                t = out.setdefault(subset, {"documents": 0, "kept": 0, "cut": 0, "removed": {}, "removed_tokens": {},
                                            "tokens": 0, "kept_tokens": 0})
                for name in ("documents", "kept", "cut", "tokens", "kept_tokens"):
                    t[name] += s[name]
                for name in ("removed", "removed_tokens"):
                    for reason, n in s[name].items():
                        t[name][reason] = t[name].get(reason, 0) + n
        return out

    def extract_output(self, accumulator):
        return accumulator


class Dedup(beam.PTransform):
    """Decontaminate, then exact and near dedup: see the module's docstring for elements and outputs.

    Args (the job's flags: docs/dedup.md, "In the job: the flags"):
      exact: remove exact duplicates (after `normalization`: "none", "nfc", "nfc_whitespace").
      near: remove near duplicates: MinHash over word `ngram`-grams, `num_perm` permutations, LSH with
        `bands` x `rows` (defaults: 5-grams, 128, 7 x 18: threshold ~0.87), `seed`.
      jaccard_threshold: keep a candidate pair only if its true Jaccard reaches this (None: no check).
      rounds: large-star/small-star rounds unrolled in the graph (checked: an error if too few).
      partitions: the bucket keys' partitions, each sorted by one worker (16 bytes a pair: the job
        sizes them from its input, `pipeline/beam/dedup_stage.py`).
      eval_files: JSON-lines eval sets (`eval_text_key`); a document sharing an `eval_ngram`-gram is
        removed, or with `cut` keeps its text without the overlapping spans.
      max_eval_ngrams: the side input's bound (10 bytes per n-gram on every worker).
      file_names: names by file index, for the records' "file" fields.
      token_count: text -> tokens, for the counts' token figures (None: tokens are 0).
      keep_text: False: `kept` documents come without their text, which then crosses none of the
        exact and near groups (the job reads only `removed`; a cut's spans are in its record).
      removed_only: make only the `removed` output (the job's case): no per-document work for
        `kept` and `counts`, which are left out of the returned dict.
    """

    def __init__(self, exact: bool = True, near: bool = True, normalization: str = "nfc_whitespace", ngram: int = 5,
                 num_perm: int = 128, bands: int = 7, rows: int = 18, seed: int = 1,
                 jaccard_threshold: float | None = None, rounds: int = 8, partitions: int = 64,
                 eval_files: list[str] | tuple = (),
                 eval_text_key: str = "text", eval_ngram: int = 13, cut: bool = False,
                 max_eval_ngrams: int = 50_000_000, file_names: list[str] | None = None,
                 token_count: Callable[[str], int] | None = None, keep_text: bool = True,
                 removed_only: bool = False):
        super().__init__()
        ngrams.normalize("", normalization)  # refuses an unknown one
        if bands * rows > num_perm:
            raise ValueError(f"bands * rows ({bands} * {rows}) must be <= num_perm ({num_perm})")
        if ngram < 1 or eval_ngram < 1 or rounds < 1 or partitions < 1:
            raise ValueError("ngram, eval_ngram, rounds and partitions must be >= 1")
        if jaccard_threshold is not None and not 0 < jaccard_threshold <= 1:
            raise ValueError("jaccard_threshold must be in (0, 1]")
        if not keep_text and token_count is not None:
            raise ValueError("token_count needs keep_text=True (near duplicates' tokens are counted from their text)")
        if len(eval_files) >= 1 << 16:
            raise ValueError("at most 65535 eval files")
        self.exact, self.near, self.normalization = exact, near, normalization
        self.ngram, self.num_perm, self.bands, self.rows, self.seed = ngram, num_perm, bands, rows, seed
        self.jaccard_threshold, self.rounds, self.partitions = jaccard_threshold, rounds, partitions
        self.eval_files, self.eval_text_key, self.eval_ngram = list(eval_files), eval_text_key, eval_ngram
        self.cut, self.max_eval_ngrams = cut, max_eval_ngrams
        self._records = _Records(file_names, token_count)
        self._token_count = token_count
        self.keep_text, self.removed_only = keep_text, removed_only

    def expand(self, documents):
        if not isinstance(documents.windowing.windowfn, GlobalWindows):
            raise ValueError("Dedup reads a bounded collection in the global window (duplicates in the whole input)")
        tokens = self._token_count or (lambda text: 0)
        docs = documents | "OrderKeys" >> beam.Map(_to_order)  # (order key, doc)
        removed = []
        if self.eval_files:
            evals = (documents.pipeline
                     | "EvalFiles" >> beam.Create(list(enumerate(self.eval_files)))
                     | "EvalNgrams" >> beam.MapTuple(
                         lambda i, path, key=self.eval_text_key, n=self.eval_ngram: (i, eval_ngrams(path, key, n)))
                     | "EvalSet" >> beam.CombineGlobally(_EvalNgramsFn(self.max_eval_ngrams)))
            out = docs | "Decontaminate" >> beam.ParDo(
                DecontaminateFn(self.eval_ngram, self.cut, self.eval_files, self._records),
                beam.pvalue.AsSingleton(evals)).with_outputs(REMOVED, main=KEPT)
            docs, removed = out[KEPT], [*removed, out[REMOVED]]
        if self.exact or self.near:
            # The text is read here once: the groups after this see its hash and signature only.
            signed = docs | "Sign" >> beam.ParDo(SignFn(
                self.normalization if self.exact else None, self.ngram if self.near else None, self.num_perm,
                self.seed, self.near and self.jaccard_threshold is not None, self.keep_text)).with_outputs(
                    _SHINGLES, main=_SIGS)
            docs = signed[_SIGS]  # (exact key, (key, doc, sig))
            if self.exact and self.near:  # the exact key is one more bucket of the near stage's group
                docs, near_removed = self._near(docs, signed[_SHINGLES], exact=True)
                removed.append(near_removed)
            elif self.exact:
                out = (docs
                       | "ExactGroup" >> beam.GroupByKey()
                       | "Exact" >> beam.ParDo(ExactFn(self._records)).with_outputs(REMOVED, main=KEPT))
                docs, removed = out[KEPT], [*removed, out[REMOVED]]  # (key, (doc, sig))
                docs = docs | "Docs" >> beam.MapTuple(lambda k, doc_sig: (k, doc_sig[0]))
            else:
                docs = docs | "NoExact" >> beam.MapTuple(lambda _, kds: (kds[0], kds[1:]))
                docs, near_removed = self._near(docs, signed[_SHINGLES])
                removed.append(near_removed)
        removed = removed | "Removed" >> beam.Flatten() if removed else (
            documents.pipeline | "NoneRemoved" >> beam.Create([]))
        if self.removed_only:
            return {REMOVED: removed}
        kept = docs | "FileLine" >> beam.Map(_from_order)
        counts = ((documents | "CountRead" >> beam.MapTuple(lambda _, d: (d["subset"], "documents", tokens(d["text"]))),
                   kept | "CountKept" >> beam.MapTuple(lambda _, d: (d["subset"], "kept", tokens(d.get("text", "")))),
                   removed | "CountRemoved" >> beam.Map(lambda r: (r["subset"], r["reason"], r.get("tokens", 0))))
                  | "CountAll" >> beam.Flatten()
                  | "Counts" >> beam.CombineGlobally(CountsFn()))
        return {KEPT: kept, REMOVED: removed, COUNTS: counts}

    def _near(self, docs, shingles, exact: bool = False):
        """(key, (doc, sig)) -> (kept (key, doc), duplicate_near records).

        With `exact`, `docs` are (exact key, (key, doc, sig)) and the exact keys are buckets of the
        same group as the bands' (one shuffle fewer than an exact group before it): a duplicate's
        only edge that matters is to its twin (its bands' buckets hold its twin too), so the
        components of the other documents, their first documents and so every record are those of
        exact dedup followed by near dedup on its survivors; the records then include the
        `duplicate_exact` ones.
        """
        stars = (docs
                 | "BucketPairs" >> beam.ParDo(_BucketPairsFn(self.bands, self.rows, self.partitions, exact))
                 | "BucketGroup" >> beam.GroupByKey()
                 | "BucketStars" >> beam.ParDo(_BucketStarsFn()).with_outputs(_EXACT, main="edges"))
        if exact:
            docs = docs | "Docs" >> beam.Map(lambda element: (element[1][0], element[1][1:]))
        # (member, the bucket's first member)
        edges = stars.edges | "DistinctEdges" >> beam.Distinct()
        if self.jaccard_threshold is not None:
            edges = edges | "TrueJaccard" >> CheckedEdges(shingles, self.jaccard_threshold)
        if exact:  # an exact duplicate's edge to its twin: distinct already (one exact bucket each), no check
            edges = (edges, stars[_EXACT]) | "WithExact" >> beam.Flatten()
        for i in range(self.rounds):
            edges = edges | f"StarRound{i}" >> StarRound()
        # (member, ("root", its component's first)), (first, ("is_root", None))
        roots = (edges
                 | "StarEnds" >> beam.FlatMapTuple(_star_ends)
                 | "StarGroup" >> beam.GroupByKey()
                 | "CheckStars" >> beam.ParDo(_CheckStarFn(self.rounds)))
        tags = [roots]
        if exact:
            tags.append(stars[_EXACT] | "TagExact" >> beam.MapTuple(lambda member, twin: (member, ("exact", twin))))
        parts = [docs | "DocBlocks" >> beam.ParDo(_DocBlocksFn()),
                 tags | "Tags" >> beam.Flatten() | "TagBlocks" >> beam.Map(_block_tag)]
        out = (parts
               | "NearParts" >> beam.Flatten()
               | "NearGroup" >> beam.GroupByKey()
               | "Near" >> beam.ParDo(NearFn(self._records)).with_outputs(_CLUSTER, REMOVED, main=KEPT))
        # Only the clusters' documents: (root, their signatures and fields) -> the removed records.
        removed = (out[_CLUSTER]
                   | "ClusterGroup" >> beam.GroupByKey()
                   | "Similarity" >> beam.ParDo(ClusterFn(self._records)))
        if exact:
            removed = (removed, out[REMOVED]) | "NearAndExact" >> beam.Flatten()
        return out[KEPT], removed
