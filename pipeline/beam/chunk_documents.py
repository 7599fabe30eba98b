"""Chunk -> validated, selected, tokenized documents, and the dead letters: what every output format does first.

Element shapes:
  Chunk                                  -> ChunkDocumentsFn (a format's subclass) -> the format's blocks
                                            + dead letters ((file, span, own), (chunk, lines))
                                            + stats dict on STATS + counts on COUNTS
  ((file, span, own), [(chunk, lines)])  -> WriteDeadLettersFn -> dead-letter file info dicts
A format's DoFn (pipeline/beam/tfrecord.py `ProcessChunkFn`, pipeline/beam/megatron.py
`TokenizeDocumentsFn`) subclasses ChunkDocumentsFn and writes each chunk's documents its own way
(`_chunk_out`); its record blocks go out as they are or through a spill file (`EmitsRecords`,
pipeline/io/spill.py). Chunks are validated as they come and may be tokenized several at a time
(`encode_batch_bytes`, pipeline/beam/execution.py), each written as if alone: the outputs do not
depend on the batches.
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
from pipeline.config.job import PipelineConfig
from pipeline.core import dedup, documents
from pipeline.core.epochs import copies_of
from pipeline.format.framing import FramedRecords
from pipeline.io import inputs, outputs
from pipeline.io.publish import publish
from pipeline.io.spill import SpillWriter, load_chunk
from pipeline.io.urls import redact_url
from pipeline.tokenize.engines import BATCHED, TokenizerMismatch
from pipeline.tokenize.model import TokenizerSpec

LOG = logging.getLogger(__name__)
DEAD_LETTERS = "dead_letters"
COUNTS = "counts"  # what a format's shard plan needs, without the records
DEAD_LETTER_SPAN = 64  # consecutive chunks of a file whose dead letters share a file (256 MB of input)
DEAD_LETTER_OWN_BYTES = 1 << 20  # a chunk with more dead letters than this gets a file of its own


class EmitsRecords(beam.DoFn):
    """A DoFn whose record blocks go out as they are, or through a spill file (see pipeline/io/spill.py)."""

    def __init__(self, spill_dir: str | None):
        self._spill_dir = spill_dir
        self._spill = None

    def _emit(self, block: FramedRecords):
        if self._spill_dir is None:
            return block
        if self._spill is None:
            self._spill = SpillWriter(self._spill_dir)
        return self._spill.write(block)

    def teardown(self):
        if self._spill is not None:
            self._spill.close()


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


class ChunkDocumentsFn(EmitsRecords):
    """A chunk's lines -> kept documents, tokenized: what both output formats do before writing.

    Validation and its dead letters, subset selection, the tokenizer, epoch copies, the subsets'
    counts. ProcessChunkFn packs the documents into records; the Megatron job's TokenizeDocumentsFn
    (pipeline/beam/megatron.py) writes them one per sequence. Their dead letters are the same records.
    With `encode_batch_bytes` and an engine that gains from larger calls (engines.BATCHED) the
    chunks wait for their batch until it holds that many bytes or the bundle finishes (at most that
    and one chunk of lines), then are tokenized in one call.
    """

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, dtype: np.dtype,
                 encode_threads: int | None = None, spill_dir: str | None = None, progress: Reporter | None = None,
                 encode_batch_bytes: int = 0):
        super().__init__(spill_dir)
        self._batch_limit = encode_batch_bytes if tokenizer.backend.name in BATCHED else 0
        self._config = config
        self._special = tokenizer.special
        self._dtype = dtype
        # The checked tokenizer (Job.tokenizer), loaded in setup().
        self._encoder = tokenizer.encoder(verify=config.verify_tokenizer != "off", threads=encode_threads)
        self._selected = config.selection()
        self._schema = config.schema
        self._progress = progress or Reporter()
        self._docs = counter("documents_kept")
        self._tokens = counter("tokens")
        self._dead = counter("dead_letters")
        self._filtered = counter("documents_filtered")

    def setup(self):
        # Heavy state loads once per worker, from the tokenizer's location.
        self._encoder.load()

    def teardown(self):
        self._progress.close()
        super().teardown()

    def _dead_letter(self, chunk: inputs.Chunk, line: documents.Line, reason: str, detail: str, dead: dict) -> dict:
        dead[reason] = dead.get(reason, 0) + 1
        self._dead.inc()
        return {
            "file": redact_url(chunk.path),
            "file_index": chunk.file_index,
            "line": line.number,
            "offset": line.offset,
            "reason": reason,
            "detail": detail[:200],
            "prefix": documents.line_prefix(line),
        }

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
        chunk, removed = with_removed(element)
        self._batch.append(self._validated(chunk, removed))
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
            yield from self._chunk_out(pending.chunk, docs, dead_letters)
            first = last

    def _chunk_out(self, chunk: inputs.Chunk, docs: ChunkDocuments, dead_letters: list[dict]):
        """A chunk's outputs from its tokenized documents (the format's)."""
        raise NotImplementedError

    def _validated(self, chunk: inputs.Chunk, removed: dict | None = None) -> _Validated:
        """The chunk's lines validated: the texts to tokenize, their lines and subsets, the dead letters.

        `removed`: with --dedup / --decontaminate, the chunk's removed documents' records by line
        (pipeline/beam/dedup_stage.py): left out, counted per subset by reason with their tokens;
        a `contaminated_cut` one is kept with its cut text.
        """
        cfg = self._config
        max_line_bytes, schema, selected = cfg.max_line_bytes, self._schema, self._selected
        subsets: dict = {}
        dead: dict[str, int] = {}
        file_stats = documents.file_stats()
        dead_letters, texts, kept_subsets, kept_lines = [], [], [], []
        removed_texts, removed_of = [], []  # (subset counts, reason) of each removed text
        for line in chunk.lines:
            try:
                doc = documents.validate(line, max_line_bytes, schema, file_stats)
            except documents.BadRecord as bad:
                dead_letters.append(self._dead_letter(chunk, line, bad.reason, bad.detail, dead))
                continue
            text, subset = doc.text, doc.subset
            s = subsets.setdefault(subset, {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0})
            s["documents"] += 1
            reason = documents.filter_reason(text, subset, selected)
            if reason:
                s["filtered"][reason] = s["filtered"].get(reason, 0) + 1
                self._filtered.inc()
                continue
            record = removed.get(line.number) if removed else None
            if record is not None and record["reason"] == dedup.CUT:
                s["cut"] = s.get("cut", 0) + 1
                text = dedup.cut_text(text, record["spans"])
            elif record is not None:
                s.setdefault("removed", {})
                s["removed"][record["reason"]] = s["removed"].get(record["reason"], 0) + 1
                removed_texts.append(text)
                removed_of.append((s, record["reason"]))
                continue
            s["kept"] += 1
            s["text_bytes"] += len(line.data)
            texts.append(text)
            kept_subsets.append(subset)
            kept_lines.append(line)

        if removed is not None:
            self._count_removed_tokens(subsets, removed_texts, removed_of)
        return _Validated(chunk, texts, kept_lines, kept_subsets, subsets, dead, file_stats, dead_letters)

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
        self._docs.inc(int(written.sum()))
        self._progress.add(done=chunk.input_bytes, docs=int(written.sum()), tokens=int(docs.sizes[written].sum()))
        return beam.pvalue.TaggedOutput(STATS, {"subsets": docs.counts, "dead_letters": docs.dead,
                                                "lines": len(chunk.lines),
                                                "inputs": {f"{chunk.file_index:05d}": docs.file_stats}})



def with_removed(element) -> tuple[inputs.Chunk, dict | None]:
    """A tokenizing stage's element: a Chunk, or with dedup (Chunk or SpilledChunk, {line: removed record})."""
    chunk, removed = element if isinstance(element, tuple) else (element, None)
    return load_chunk(chunk), removed


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
