"""Each document's text read once: its exact key and MinHash signature (SignFn); exact dedup on the key.

`BatchingFn` is the base of the DoFns that gather their input and emit it per batch (here and in
pipeline/beam/dedup/near.py).
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.dedup.records import REMOVED, Records, counter
from pipeline.beam.graph import Runtime

SIGS, SHINGLES = "sigs", "shingles"


class BatchingFn(beam.DoFn):
    """A DoFn that gathers its input and emits it per batch.

    `_add` says when a batch is full, `_flush` emits it and starts the next; the last one goes as
    the bundle finishes, in the global window (the only one Dedup reads).
    """

    flush_each = False  # set where the runner drops what finish_bundle emits (`batching`)

    def start_bundle(self):
        self._reset()

    def process(self, element):
        if self._add(element) or self.flush_each:
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


def batching(fn: BatchingFn, runtime: Runtime) -> BatchingFn:
    """`fn`, flushing after each element where what finish_bundle emits is dropped (pipeline/beam/graph.py)."""
    fn.flush_each = not runtime.finish_bundle_outputs
    return fn


@beam.typehints.with_output_types(typing.Any)  # a tagged output beside the main one: no key-value hint to infer
class SignFn(BatchingFn):
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
        yield from self.signed(batch)

    def signed(self, batch: list):
        """The outputs of documents [(key, doc)] signed at once (after `setup`): SIGS, and SHINGLES if asked."""
        if not batch:
            return
        if self._shingles:
            for element in batch:
                yield from self._one(element)
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
            yield beam.pvalue.TaggedOutput(SHINGLES, (key, np.unique(grams).tobytes()))
        yield exact, (key, self._fields(doc), sig)

    def _fields(self, doc: dict) -> dict:
        return doc if self._keep else {n: v for n, v in doc.items() if n != "text"}



class ExactFn(beam.DoFn):
    """(text hash, [(key, doc, sig), ...]) -> the first (key, (doc, sig)) kept; every other a `duplicate_exact` one."""

    def __init__(self, records: Records):
        self._records = records
        self._removed = counter("duplicate_exact")

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

