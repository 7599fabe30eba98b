"""Decontamination: the eval files' n-grams as one sorted side input; documents sharing one removed or cut.

The side input is bounded by `max_eval_ngrams` (8 bytes a hash plus 2 for the first eval file
holding it); a document with any of them is removed as `contaminated`, or with `cut` kept without
the overlapping spans (its `contaminated_cut` record lists them). Each file's n-grams are read by
`pipeline/io/eval_sets.py`'s `eval_ngrams`.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from pipeline.beam.dedup_records import REMOVED, Records, counter
from pipeline.core import dedup, ngrams
from pipeline.core.memo import ProcessMemo
from pipeline.io.eval_sets import eval_ngrams


class EvalNgramsFn(beam.CombineFn):
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

    def __init__(self, n: int, cut: bool, eval_files: list[str], records: Records):
        self._n, self._cut, self._eval_files, self._records = n, cut, eval_files, records
        self._removed = counter("contaminated")

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


class DecontaminateEachWorkerFn(DecontaminateFn):
    """DecontaminateFn with the eval set made by each worker from the eval files, where a side input is not once."""

    _EVALS = ProcessMemo(2)

    def __init__(self, n: int, cut: bool, eval_files: list[str], records: Records, text_key: str, max_ngrams: int):
        super().__init__(n, cut, eval_files, records)
        self._text_key, self._max = text_key, max_ngrams

    def setup(self):
        key = (tuple(self._eval_files), self._text_key, self._n, self._max)
        self._evals = self._EVALS.get(key, self._eval_set)

    def _eval_set(self):
        combine = EvalNgramsFn(self._max)
        parts = combine.create_accumulator()
        for i, path in enumerate(self._eval_files):
            parts = combine.add_input(parts, (i, eval_ngrams(path, self._text_key, self._n)))
        return combine.extract_output(parts)

    def process(self, element):
        yield from super().process(element, self._evals)
