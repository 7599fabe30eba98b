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
   (`near.near_dedup`), with the same records as exact dedup followed by near dedup on its survivors.

Memory per worker: the buckets' pairs are grouped by partition, packed (16 bytes a pair, a bucket
never split), and one partition's are sorted at a time: a bucket of 100,000 copies costs 1.6 MB
there. Every other reducer reads its group twice (the smallest key, then the output) and holds one
element at a time, so a cluster of 100,000 copies costs what a pair does (beyond what the runner
itself buffers for a group: DirectRunner holds a group in memory, Dataflow and Flink stream it).
tests/test_dedup_beam.py measures it.

The steps live beside this module: `decontaminate.py`, `sign.py` (the text read once; exact dedup),
`near.py`, `records.py` (the removed records); the algorithms are pure functions in pipeline/core/
(dedup, minhash, ngrams).
"""

from __future__ import annotations

from collections.abc import Callable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.dedup.decontaminate import DecontaminateEachWorkerFn, DecontaminateFn, EvalNgramsFn
from pipeline.beam.dedup.near import near_dedup
from pipeline.beam.dedup.records import COUNTS, KEPT, REMOVED, Records
from pipeline.beam.dedup.sign import SHINGLES, SIGS, ExactFn, SignFn, batching
from pipeline.beam.graph import EVERY_FEATURE, Runtime, multi_output
from pipeline.core import dedup, ngrams
from pipeline.io.eval_sets import eval_ngrams


def _to_order(element):
    (file_index, line), doc = element
    return dedup.order_key(file_index, line), doc


def _from_order(element):
    key, doc = element
    return dedup.order_parts(key), doc


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
        sizes them from its input, `pipeline/beam/dedup/stage.py`).
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
                 removed_only: bool = False, runtime: Runtime = EVERY_FEATURE):
        super().__init__()
        self._runtime = runtime
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
        self._records = Records(file_names, token_count)
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
                     | "EvalSet" >> beam.CombineGlobally(EvalNgramsFn(self.max_eval_ngrams)))
            if self._runtime.side_inputs:
                out = docs | "Decontaminate" >> beam.ParDo(
                    DecontaminateFn(self.eval_ngram, self.cut, self.eval_files, self._records),
                    beam.pvalue.AsSingleton(evals)).with_outputs(REMOVED, main=KEPT)
            else:
                out = multi_output(docs, "Decontaminate", DecontaminateEachWorkerFn(
                    self.eval_ngram, self.cut, self.eval_files, self._records, self.eval_text_key,
                    self.max_eval_ngrams), REMOVED, main=KEPT, runtime=self._runtime)
            docs, removed = out[KEPT], [*removed, out[REMOVED]]
        if self.exact or self.near:
            # The text is read here once: the groups after this see its hash and signature only.
            signed = multi_output(docs, "Sign", batching(self.sign_fn(), self._runtime), SHINGLES, main=SIGS,
                                  runtime=self._runtime)
            docs, grouped = self.group(signed[SIGS], signed[SHINGLES])
            removed += grouped
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

    @property
    def records(self) -> Records:
        """How this Dedup makes its removed records."""
        return self._records

    def sign_fn(self) -> SignFn:
        """The DoFn that signs documents as this Dedup does: (key, doc) -> (exact key, (key, doc, sig)) + SHINGLES."""
        return SignFn(self.normalization if self.exact else None, self.ngram if self.near else None, self.num_perm,
                      self.seed, self.near and self.jaccard_threshold is not None, self.keep_text)

    def group(self, docs, shingles) -> tuple:
        """Signed documents (exact key, (key, doc, sig)) and their shingles -> (kept documents, [removed records]).

        The exact and near stages alone: the job signs its documents chunk by chunk before
        (pipeline/beam/dedup/chunks.py) and hands them here.
        """
        removed = []
        if self.exact and self.near:  # the exact key is one more bucket of the near stage's group
            docs, near_removed = self._near(docs, shingles, exact=True)
            removed.append(near_removed)
        elif self.exact:
            out = multi_output(docs | "ExactGroup" >> beam.GroupByKey(), "Exact", ExactFn(self._records),
                               REMOVED, main=KEPT, runtime=self._runtime)
            docs, removed = out[KEPT], [*removed, out[REMOVED]]  # (key, (doc, sig))
            docs = docs | "Docs" >> beam.MapTuple(lambda k, doc_sig: (k, doc_sig[0]))
        else:
            docs = docs | "NoExact" >> beam.MapTuple(lambda _, kds: (kds[0], kds[1:]))
            docs, near_removed = self._near(docs, shingles)
            removed.append(near_removed)
        return docs, removed

    def _near(self, docs, shingles, exact: bool = False):
        """(key, (doc, sig)) -> (kept (key, doc), duplicate_near records): `near_dedup` with these options."""
        return near_dedup(docs, shingles, self.bands, self.rows, self.partitions, self.jaccard_threshold, self.rounds,
                          self._records, exact=exact, runtime=self._runtime)
