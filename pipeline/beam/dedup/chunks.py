"""Dedup's input, chunk by chunk: the policy's documents, decontaminated and signed, each chunk's committed.

Element shapes:
  Chunk or Committed -> SignDocumentsFn -> (exact key, (key, fields, signature)) on SIGS (its main output)
                                         + (key, n-gram hashes) on SHINGLES (with --dedup_verify_jaccard)
                                         + decontamination's removed records on REMOVED
                                         + ((file_index, chunk), {line: Verdict}) on VERDICTS (with stages)
What Dedup's own steps do one document at a time (pipeline/beam/dedup/transform.py: the policy and its
stages, decontamination, the exact key and MinHash signature: the text read once) is done here for
a chunk at once, so that a resumable run commits it per chunk (pipeline/process/commit.py
`SignedChunk`) before the groups, which need every chunk, start: a run that takes it up does
neither the stages nor the signing again for a committed chunk. The groups (exact and near) are
Dedup's, on these documents (`Dedup.group`). The documents and records are those Dedup makes from
the same documents; decontamination reads the eval set once per worker process (a side input
would be read once per job, but is not made once on every runner).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.beam.dedup.decontaminate import decontaminate, eval_set
from pipeline.beam.dedup.records import REMOVED, counter
from pipeline.beam.dedup.sign import SHINGLES
from pipeline.beam.dedup.transform import Dedup
from pipeline.config.job import PipelineConfig
from pipeline.core import dedup
from pipeline.io.record_files import load_chunk
from pipeline.io.snapshot import InputChangedError
from pipeline.io.urls import redact_url
from pipeline.io.workfolder import WorkFolder
from pipeline.process import commit
from pipeline.process.commit import Committed, ReadInfo, SignedChunk
from pipeline.process.dedup_input import DedupInput

VERDICTS = "verdicts"  # the stages' verdicts per chunk


class SignDocumentsFn(beam.DoFn):
    """A chunk -> its documents decontaminated and signed, as Dedup would; committed with a work folder."""

    def __init__(self, config: PipelineConfig, deduper: Dedup, work: WorkFolder | None = None):
        self._config, self._input, self._dedup = config, DedupInput(config), deduper
        self._sign = deduper.sign_fn()
        self._work = work
        self._reused, self._signs = counter("chunks_reused"), counter("chunks_signed")

    def setup(self):
        self._input.setup()
        self._sign.setup()
        d = self._dedup
        self._evals = eval_set(d.eval_files, d.eval_text_key, d.eval_ngram, d.max_eval_ngrams) if d.eval_files else None

    def process(self, chunk):
        found = None
        if self._work is not None:
            found = commit.fetch_signed(self._work, chunk.file_index, chunk.chunk_index)
            if found is None and isinstance(chunk, Committed):  # torn or gone: the chunk is read again
                chunk = commit.read_again(chunk, self._config)
        if found is not None:
            signed, info = found
            if not isinstance(chunk, Committed) and ReadInfo.of(load_chunk(chunk)) != info:
                raise InputChangedError(
                    f"{redact_url(chunk.path)} changed since the run this one resumes: chunk {chunk.chunk_index} "
                    "does not hold what its committed dedup input was made from. Run the job again with --overwrite")
            self._reused.inc()
        else:
            chunk = load_chunk(chunk)
            signed = self._signed(chunk)
            self._signs.inc()
            if self._work is not None:
                commit.commit_signed(self._work, chunk, signed)
        yield from signed.signed
        for out in signed.shingles or ():
            yield beam.pvalue.TaggedOutput(SHINGLES, out)
        for record in signed.removed:
            yield beam.pvalue.TaggedOutput(REMOVED, record)
        if signed.verdicts is not None:
            yield beam.pvalue.TaggedOutput(VERDICTS, ((chunk.file_index, chunk.chunk_index), signed.verdicts))

    def _signed(self, chunk) -> SignedChunk:
        found, d = self._input.process(chunk), self._dedup
        docs, removed = [], []
        for (file_index, line), doc in found.documents:
            key = dedup.order_key(file_index, line)
            if self._evals is not None:
                doc, record = decontaminate(key, doc, self._evals, d.eval_ngram, d.cut, d.eval_files, d.records)
                if record is not None:
                    removed.append(record)
                if doc is None:
                    continue
            docs.append((key, doc))
        if not (d.exact or d.near):
            return SignedChunk([], None, removed, found.verdicts)
        signed, shingles = [], []
        for out in self._sign.signed(docs):
            if isinstance(out, beam.pvalue.TaggedOutput):
                shingles.append(out.value)
            else:
                signed.append(out)
        return SignedChunk(signed, shingles if d.near and d.jaccard_threshold is not None else None, removed,
                           found.verdicts)
