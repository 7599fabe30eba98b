"""Chunk -> validated, selected, tokenized documents, and the dead letters: what every output format does first.

Element shapes:
  Chunk (with dedup: (Chunk, {line: removed record}[, {line: Verdict}]))
                                         -> ChunkDocumentsFn (a format's subclass) -> the format's blocks
                                            + dead letters ((file, span, own), (chunk, lines))
                                            + removal and cut records on REMOVED (pipeline/beam/removed.py)
                                            + stats dict on STATS + counts on COUNTS
  ((file, span, own), [(chunk, lines)])  -> WriteDeadLettersFn -> dead-letter file info dicts
A format's DoFn (pipeline/beam/tfrecord.py `ProcessChunkFn`, pipeline/beam/megatron.py
`TokenizeDocumentsFn`) subclasses ChunkDocumentsFn and writes each chunk's documents its own way
(`_chunk_out`); its record blocks go out through the sink it is given (`emitted`,
pipeline/io/sinks.py). What is kept is the document policy's (pipeline/stages/policy.py: validation,
subset selection, the configured stages, dedup's verdicts). Chunks are validated as they come and
may be tokenized several at a time (`encode_batch_bytes`, pipeline/beam/execution.py), each written
as if alone: the outputs do not depend on the batches.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.progress import Reporter
from pipeline.beam.read import STATS, counter
from pipeline.beam.removed import REMOVED, removed_part
from pipeline.config.job import PipelineConfig
from pipeline.core import documents
from pipeline.core.epochs import copies_of
from pipeline.format.framing import FramedRecords
from pipeline.io import inputs, outputs
from pipeline.io.publish import publish
from pipeline.io.record_files import load_chunk
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.urls import redact_url
from pipeline.stages import policy
from pipeline.tokenize.engines import BATCHED, TokenizerMismatch
from pipeline.tokenize.model import TokenizerSpec

LOG = logging.getLogger(__name__)
DEAD_LETTERS = "dead_letters"
COUNTS = "counts"  # what a format's shard plan needs, without the records
DEAD_LETTER_SPAN = 64  # consecutive chunks of a file whose dead letters share a file (256 MB of input)
DEAD_LETTER_OWN_BYTES = 1 << 20  # a chunk with more dead letters than this gets a file of its own


def emitted(sink: RecordSink, block: FramedRecords, source: tuple):
    """What a step emits for a block of records from `source`: what its sink gives (the block, or a reference)."""
    return sink.put(block, "-".join(map(str, source)))


@dataclasses.dataclass
class ChunkDocuments:
    """A chunk's kept documents, tokenized, and the counts of its STATS output.

    Document i (`lines[i]`, of subset `subsets[i]`) is ids[offsets[i]:offsets[i + 1]], `sizes[i]`
    tokens once written with BOS/EOS, in `copies[i]` epoch copies (-1: left out after tokenizing).
    """

    lines: list[documents.Line]
    subsets: list[str]
    ids: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    copies: np.ndarray
    counts: dict  # per subset: documents, kept, filtered (by reason), text_bytes; then tokens
    dead: dict  # dead letters by reason
    file_stats: dict  # validation's counts (documents.file_stats())
    labels: list | None = None  # the stages' labels of each document ({"language": "en"} or None), if any

    def unkeep(self, i: int) -> dict:
        """Leave out document i, counted as kept so far; returns its subset's counts."""
        s = self.counts[self.subsets[i]]
        s["kept"] -= 1
        s["text_bytes"] -= len(self.lines[i].data)
        self.copies[i] = -1  # never written
        return s


@dataclasses.dataclass
class _Validated:
    """A chunk's lines validated, its texts waiting to be tokenized (`ChunkDocumentsFn._validated`)."""

    chunk: inputs.Chunk
    texts: list[str]
    kept_lines: list[documents.Line]
    kept_subsets: list[str]
    counts: dict
    dead: dict
    file_stats: dict
    dead_letters: list[dict]
    records: list[dict]  # removed/ records: the chunk's removals and cuts
    labels: list | None  # the stages' labels of each kept document, when any has some


class ChunkDocumentsFn(beam.DoFn):
    """A chunk's lines -> kept documents, tokenized: what both output formats do before writing.

    The document policy (validation and its dead letters, subset selection, the configured stages,
    dedup's verdicts) and its removed/ records, the tokenizer, epoch copies, the subsets' counts.
    ProcessChunkFn packs the documents into records; the Megatron job's TokenizeDocumentsFn
    (pipeline/beam/megatron.py) writes them one per sequence. Their dead letters are the same records.
    With `encode_batch_bytes` and an engine that gains from larger calls (engines.BATCHED) the
    chunks wait for their batch until it holds that many bytes or the bundle finishes (at most that
    and one chunk of lines), then are tokenized in one call.
    """

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, dtype: np.dtype,
                 encode_threads: int | None = None, sink: RecordSink | None = None, progress: Reporter | None = None,
                 encode_batch_bytes: int = 0):
        self._sink = sink or KEEP  # where the record blocks go (pipeline/io/sinks.py)
        self._batch_limit = encode_batch_bytes if tokenizer.backend.name in BATCHED else 0
        self._config = config
        self._special = tokenizer.special
        self._dtype = dtype
        # The checked tokenizer (Job.tokenizer), loaded in setup().
        self._encoder = tokenizer.encoder(verify=config.verify_tokenizer != "off", threads=encode_threads)
        self._policy = config.document_policy()
        self._schema = config.schema
        self._lists_removed = config.lists_removed
        # With dedup the stages ran in its input (pipeline/beam/dedup_stage.py): their verdicts are replayed here.
        self._runs_stages = not config.dedup_enabled
        self._progress = progress or Reporter()
        self._docs = counter("documents_kept")
        self._tokens = counter("tokens")
        self._dead = counter("dead_letters")
        self._filtered = counter("documents_filtered")

    def setup(self):
        # Heavy state loads once per worker, from the tokenizer's location (and the stages', when they run here).
        self._encoder.load()
        if self._runs_stages:
            self._policy.setup()

    def teardown(self):
        self._progress.close()
        self._sink.close()

    def _dead_letter(self, chunk: inputs.Chunk, line: documents.Line, reason: str, detail: str, dead: dict) -> dict:
        dead[reason] = dead.get(reason, 0) + 1
        self._dead.inc()
        record = {
            "file": redact_url(chunk.path),
            "file_index": chunk.file_index,
            "line": line.number,
            "offset": line.offset,
            "reason": reason,
            "detail": detail[:200],
            "prefix": documents.line_prefix(line),
        }
        ident = documents.line_id(line, self._schema) if self._schema.id_key else None
        if ident is not None:
            record["id"] = ident
        return record

    @staticmethod
    def _dead_letters_out(chunk: inputs.Chunk, dead_letters: list[dict]):
        """The chunk's dead letters as one DEAD_LETTERS element (none without any): a chunk's worth at most."""
        if dead_letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter_part(chunk, dead_letters))

    def start_bundle(self):
        self._batch: list[_Validated] = []
        self._batch_bytes = 0

    def process(self, element):
        """Validate a chunk now; tokenize it with the chunks before it once `encode_batch_bytes` are waiting.

        A chunk claimed from a file shared by the workers, or the last of a queued group of work
        items (`Chunk.tokenize_now`), goes at once with those waiting: a taken group is then done when
        its reading ends, and no worker holds chunks while the others finish.
        """
        chunk, removed, verdicts = with_removed(element)
        self._batch.append(self._validated(chunk, removed, verdicts))
        self._batch_bytes += chunk.num_bytes
        if chunk.tokenize_now or self._batch_bytes >= self._batch_limit:
            yield from self._flush()

    def finish_bundle(self):
        for out in self._flush():
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
            else:
                yield GlobalWindows.windowed_value(out)
        self._progress.flush()

    def _flush(self):
        """Tokenize the waiting chunks' texts in one call and write each chunk (`_chunk_out`), in order."""
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if not batch:
            return
        texts = [text for pending in batch for text in pending.texts]
        ids, offsets, mismatches = self._encoder.encode_verified(texts)
        first = 0
        for pending in batch:
            last = first + len(pending.texts)
            own = (ids[offsets[first]:offsets[last]], offsets[first:last + 1] - offsets[first],
                   [(i - first, detail) for i, detail in mismatches if first <= i < last])
            docs, dead_letters = self._documents(pending, *own)
            docs.labels = pending.labels
            yield from self._chunk_out(pending.chunk, docs, dead_letters)
            if pending.records:
                yield beam.pvalue.TaggedOutput(REMOVED, removed_part(pending.chunk, pending.records))
            first = last

    def _chunk_out(self, chunk: inputs.Chunk, docs: ChunkDocuments, dead_letters: list[dict]):
        """A chunk's outputs from its tokenized documents (the format's)."""
        raise NotImplementedError

    def _validated(self, chunk: inputs.Chunk, removed: dict | None = None, verdicts: dict | None = None) -> _Validated:
        """The chunk's lines through the document policy: texts to tokenize, their lines and subsets, dead letters.

        `removed`, `verdicts`: with --dedup / --decontaminate, the chunk's removed documents' records
        and the stages' verdicts by line (pipeline/beam/dedup_stage.py). A removed document is
        counted per subset by reason with its tokens; a cut one is kept with its cut text.
        """
        subsets: dict = {}
        dead: dict[str, int] = {}
        file_stats = documents.file_stats()
        dead_letters, texts, kept_subsets, kept_lines, labels, records = [], [], [], [], [], []
        removed_texts, removed_of = [], []  # (subset counts, reason) of each removed text
        for outcome in self._policy.decide(chunk, file_stats, removed, verdicts):
            line = outcome.line
            if outcome.bad is not None:
                dead_letters.append(self._dead_letter(chunk, line, outcome.bad.reason, outcome.bad.detail, dead))
                continue
            s = subsets.setdefault(outcome.subset, {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0})
            policy.count(s, outcome)
            records.extend(outcome.records)
            if outcome.counts_as == policy.REMOVED:
                removed_texts.append(outcome.text)
                removed_of.append((s, outcome.reason))
                continue
            if outcome.reason is not None:
                self._filtered.inc()
                continue
            s["text_bytes"] += len(line.data)
            texts.append(outcome.text)
            kept_subsets.append(outcome.subset)
            kept_lines.append(line)
            labels.append(outcome.labels)

        if self._lists_removed:
            self._count_removed_tokens(subsets, removed_texts, removed_of)
        return _Validated(chunk, texts, kept_lines, kept_subsets, subsets, dead, file_stats, dead_letters, records,
                          labels if any(labels) else None)

    def _documents(self, pending: _Validated, ids: np.ndarray, offsets: np.ndarray,
                   mismatches: list[tuple[int, str]]) -> tuple[ChunkDocuments, list[dict]]:
        """A validated chunk's kept documents from their ids, and its dead letters (bad lines, then mismatches)."""
        cfg, special, chunk = self._config, self._special, pending.chunk
        kept_lines, dead_letters = pending.kept_lines, pending.dead_letters
        copies = np.array([copies_of(cfg.epochs_of(subset), cfg.seed, chunk.file_index, line.number)
                           for subset, line in zip(pending.kept_subsets, kept_lines, strict=True)], np.int64)
        sizes = np.diff(offsets) + special.add_bos + special.add_eos
        docs = ChunkDocuments(kept_lines, pending.kept_subsets, ids, offsets, sizes, copies, pending.counts,
                              pending.dead, pending.file_stats)
        for i, detail in mismatches:  # only with --verify_tokenizer: the fast backend disagreed with the reference
            if cfg.verify_tokenizer == "fail":
                raise TokenizerMismatch(f"{redact_url(chunk.path)} line {kept_lines[i].number}: {detail}")
            docs.unkeep(i)["documents"] -= 1
            dead_letters.append(self._dead_letter(chunk, kept_lines[i], "tokenizer_mismatch", detail, pending.dead))
        return docs, dead_letters

    def _count_removed_tokens(self, subsets: dict, texts: list[str], removed_of: list[tuple[dict, str]]) -> None:
        """Per subset `removed_tokens` by reason: the tokens (with BOS/EOS) the removed documents would have had."""
        for s in subsets.values():
            s.setdefault("removed", {})
            s.setdefault("removed_tokens", {})
        if not texts:
            return
        _, offsets, _ = self._encoder.encode_verified(texts)
        extra = self._special.add_bos + self._special.add_eos
        for (s, reason), n in zip(removed_of, np.diff(offsets).tolist(), strict=True):
            s["removed_tokens"][reason] = s["removed_tokens"].get(reason, 0) + n + extra

    def _stats_out(self, chunk: inputs.Chunk, docs: ChunkDocuments):
        """Count the tokens of the documents written and report progress; the chunk's STATS output."""
        written = docs.copies >= 0
        for subset, size, count in zip(docs.subsets, docs.sizes.tolist(), docs.copies.tolist(), strict=True):
            if count >= 0:
                s = docs.counts[subset]
                s["tokens"] = s.get("tokens", 0) + size
                s["tokens_with_epochs"] = s.get("tokens_with_epochs", 0) + count * size
        if docs.labels is not None:
            _count_labels(docs)
        self._docs.inc(int(written.sum()))
        self._progress.add(done=chunk.input_bytes, docs=int(written.sum()), tokens=int(docs.sizes[written].sum()))
        return beam.pvalue.TaggedOutput(STATS, {"subsets": docs.counts, "dead_letters": docs.dead,
                                                "lines": len(chunk.lines),
                                                "inputs": {f"{chunk.file_index:05d}": docs.file_stats}})



def _count_labels(docs: ChunkDocuments) -> None:
    """Per subset `labels[key][value]`: the documents written with that label and their tokens (one copy)."""
    for subset, size, count, labels in zip(docs.subsets, docs.sizes.tolist(), docs.copies.tolist(), docs.labels,
                                           strict=True):
        if count < 0 or not labels:
            continue
        by_key = docs.counts[subset].setdefault("labels", {})
        for key, value in labels.items():
            entry = by_key.setdefault(key, {}).setdefault(str(value), {"documents": 0, "tokens": 0})
            entry["documents"] += 1
            entry["tokens"] += size


def with_removed(element) -> tuple[inputs.Chunk, dict | None, dict | None]:
    """A tokenizing stage's element -> (chunk, removed records by line, the stages' verdicts by line).

    A Chunk; or with dedup (Chunk or SpilledChunk, {line: removed record}), and with stages too
    ({line: Verdict}) as well.
    """
    if not isinstance(element, tuple):
        return load_chunk(element), None, None
    chunk, removed, *verdicts = element
    return load_chunk(chunk), removed, verdicts[0] if verdicts else None


def dead_letter_part(chunk: inputs.Chunk, items: list[dict]):
    """A chunk's dead-letter dicts -> ((file, first chunk, own), (chunk, JSON lines)).

    The dead letters of DEAD_LETTER_SPAN consecutive chunks of a file share one output file, so a
    corpus with a bad line in every chunk makes ~1 file per 256 MB of input, not one per chunk;
    a chunk with more than DEAD_LETTER_OWN_BYTES of them (a garbage file) gets a file of its own,
    so no group holds more than DEAD_LETTER_SPAN x DEAD_LETTER_OWN_BYTES or one chunk's worth.
    """
    file_index, chunk_index = chunk.file_index, chunk.chunk_index
    lines = b"".join(outputs.dead_letter_lines(items))
    if len(lines) > DEAD_LETTER_OWN_BYTES:
        return (file_index, chunk_index, True), (chunk_index, lines)
    return (file_index, chunk_index - chunk_index % DEAD_LETTER_SPAN, False), (chunk_index, lines)


class WriteDeadLettersFn(beam.DoFn):
    """((file, first chunk, own), [(chunk, JSON lines)]) -> info of one run-<id>/dead_letters/ file."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element):
        (file_index, first_chunk, own), parts = element
        parts = sorted(parts, key=lambda p: p[0])  # chunk order: the lines are (file, line) sorted
        name = outputs.run_path(self._run_id,
                                outputs.dead_letter_name(self._config.split, file_index, first_chunk, own=own))
        size, sha = publish(posixpath.join(self._config.output_dir, name), [lines for _, lines in parts])
        yield {"path": name, "records": sum(lines.count(b"\n") for _, lines in parts), "bytes": size,
               "sha256": sha}


class WriteDeadLetters(beam.PTransform):
    """The DEAD_LETTERS output ((file, first chunk, own), (chunk, JSON lines)) -> info of each dead_letters/ file."""

    def __init__(self, config: PipelineConfig, run_id: str):
        super().__init__()
        self._config = config
        self._run_id = run_id

    def expand(self, parts):
        return (
            parts
            | "GroupByPart" >> beam.GroupByKey()  # ((file, first chunk, own), [(chunk, lines)])
            | "Write" >> beam.ParDo(WriteDeadLettersFn(self._config, self._run_id))
        )
