"""Decontamination: the eval files' n-grams as one sorted side input; documents sharing one removed or cut.

The side input is bounded by `max_eval_ngrams` (8 bytes a hash plus 2 for the first eval file
holding it); a document with any of them is removed as `contaminated`, or with `cut` kept without
the overlapping spans (its `contaminated_cut` record lists them). Each file's n-grams are read by
`pipeline/io/eval_sets.py`'s `eval_ngrams`.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from pipeline.beam.dedup.records import REMOVED, Records, counter
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


def decontaminate(key: int, doc: dict, evals, n: int, cut: bool, eval_files: list[str],
                  records: Records) -> tuple[dict | None, dict | None]:
    """One document against the eval set `evals` (sorted hashes, first file of each): (the doc kept, its record).

    Kept as it is: (doc, None); removed: (None, a `contaminated` record); with `cut`: (the doc
    without the overlapping spans, its `contaminated_cut` record).
    """
    hashes, files = evals
    tokens, spans = ngrams.word_spans(doc["text"])
    grams = ngrams.ngram_hashes(ngrams.word_hashes(tokens), n) if len(tokens) >= n else np.empty(0)
    found = dedup.matches(grams.astype(np.uint64), hashes)
    if len(found) == 0:
        return doc, None
    first = int(found[0])
    at = int(np.searchsorted(hashes, grams[first]))
    evidence = {"eval_file": eval_files[int(files[at])], "ngram": " ".join(tokens[first : first + n])}
    share = len(found) / len(grams)
    if cut:
        cuts = dedup.cut_spans(spans, found, n)
        record = records.record(key, doc, dedup.CUT, share, spans=cuts, **evidence)
        return {**doc, "text": dedup.cut_text(doc["text"], cuts)}, record
    return None, records.record(key, doc, "contaminated", share, **evidence)


_EVALS = ProcessMemo(2)


def eval_set(eval_files: list[str], text_key: str, n: int, max_ngrams: int):
    """The eval files' n-grams as EvalNgramsFn makes them, read once per process and arguments."""

    def make():
        combine = EvalNgramsFn(max_ngrams)
        parts = combine.create_accumulator()
        for i, path in enumerate(eval_files):
            parts = combine.add_input(parts, (i, eval_ngrams(path, text_key, n)))
        return combine.extract_output(parts)

    return _EVALS.get((tuple(eval_files), text_key, n, max_ngrams), make)


class DecontaminateFn(beam.DoFn):
    """(key, doc) -> kept (key, doc), or a `contaminated` record; with cut, the doc kept without the spans."""

    def __init__(self, n: int, cut: bool, eval_files: list[str], records: Records):
        self._n, self._cut, self._eval_files, self._records = n, cut, eval_files, records
        self._removed = counter("contaminated")

    def process(self, element, evals):
        key, doc = element
        kept, record = decontaminate(key, doc, evals, self._n, self._cut, self._eval_files, self._records)
        if record is not None:
            yield beam.pvalue.TaggedOutput(REMOVED, record)
        if kept is None:
            self._removed.inc()
        elif record is None:
            yield element
        else:
            yield key, kept


class DecontaminateEachWorkerFn(DecontaminateFn):
    """DecontaminateFn with the eval set made by each worker from the eval files, where a side input is not once."""

    def __init__(self, n: int, cut: bool, eval_files: list[str], records: Records, text_key: str, max_ngrams: int):
        super().__init__(n, cut, eval_files, records)
        self._text_key, self._max = text_key, max_ngrams

    def setup(self):
        self._evals = eval_set(self._eval_files, self._text_key, self._n, self._max)

    def process(self, element):
        yield from super().process(element, self._evals)
