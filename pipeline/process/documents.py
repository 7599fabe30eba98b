"""A work item's lines -> its kept documents, tokenized: the document policy, dead letters, removals, epochs, counts.

    WorkItem (chunk[, removed records, verdicts]) -> DocumentEngine.validate -> Validated
    [Validated, ...]                              -> DocumentEngine.tokenize -> [Documents, ...]  (one encoder call)

What is kept is the document policy's (pipeline/stages/policy.py: validation, subset selection, the
configured stages, dedup's verdicts). Several work items may be tokenized in one call; each one's
Documents are exactly those of a call of its own (tests/test_engine.py checks it).

A job that writes text only (--output_format jsonl without --tokenizer_model) carries NO_TOKENIZER:
nothing is loaded or encoded, its Documents hold no ids, and no token is counted.

With --split_by LABEL each kept document is routed to its bucket here, once, after the policy
(pipeline/format/buckets.py `bucket_of`): `buckets[i]` is document i's, and `bucket_stats` holds
each bucket's counts of its documents (kept, their bytes, tokens, labels, cuts, tallies) beside
the work item's `stats`, which count every document as without buckets. A writer writes each
bucket's documents apart (pipeline/process/tfrecord.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.config.job import PipelineConfig
from pipeline.core import documents
from pipeline.core.documents import Line
from pipeline.core.epochs import copies_of
from pipeline.core.stats import JobStats, SubsetStats
from pipeline.format.buckets import bucket_of
from pipeline.io.inputs import Chunk
from pipeline.io.urls import redact_url
from pipeline.process.redaction import Redaction
from pipeline.stages import policy
from pipeline.stages.base import FILTERED, REMOVED
from pipeline.tokenize.engines import TokenizerMismatch
from pipeline.tokenize.kinds.base import SpecialIds
from pipeline.tokenize.model import BackendChoice, TokenizerSpec

TEXT_ONLY = "none"  # the kind (and backend) of NO_TOKENIZER
NO_TOKENIZER = TokenizerSpec("", TEXT_ONLY, "", BackendChoice(TEXT_ONLY, "", {}),
                             SpecialIds(0, -1, -1, -1, -1, add_bos=False, add_eos=False))


def tokenizes(tokenizer: TokenizerSpec) -> bool:
    """Whether a job's tokenizer is one (not NO_TOKENIZER)."""
    return tokenizer.kind != TEXT_ONLY


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """What the engine processes at a time: a chunk of an input file's lines, and with dedup its verdicts.

    removed: {line: removed record} (dedup's and decontamination's, pipeline/beam/dedup/stage.py);
    verdicts: {line: Verdict} of the stages that ran in dedup's input (None: the stages run here).
    """

    chunk: Chunk
    removed: dict | None = None
    verdicts: dict | None = None


@dataclasses.dataclass
class Validated:
    """A work item through the policy: the texts to tokenize (kept documents), the rest done."""

    chunk: Chunk
    texts: list[str]
    lines: list[Line]
    subsets: list[str]
    labels: list | None  # the stages' labels of each kept document, when any has some
    stats: JobStats  # its counts so far
    dead_letters: list[dict]
    removed: list[dict]  # its removed/ records: removals and cuts
    own_ids: list | None = None  # with --id_key, each kept document's own id (redacted with --pii)
    buckets: list[str] | None = None  # with --split_by: each kept document's bucket
    bucket_stats: dict[str, JobStats] = dataclasses.field(default_factory=dict)  # each bucket's counts


@dataclasses.dataclass
class Documents:
    """A work item's kept documents, tokenized; what a writer (pipeline/process/writers.py) writes.

    Document i (`lines[i]`, of subset `subsets[i]`, text `texts[i]`) is ids[offsets[i]:offsets[i + 1]],
    `sizes[i]` tokens once written with BOS/EOS, in `copies[i]` epoch copies (-1: left out after tokenizing);
    with --split_by, of bucket `buckets[i]`, counted in `bucket_stats[buckets[i]]` too.
    Not `tokenized` (NO_TOKENIZER): no ids, sizes 0, and no token counted.
    """

    chunk: Chunk
    texts: list[str]
    lines: list[Line]
    subsets: list[str]
    labels: list | None
    ids: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    copies: np.ndarray
    stats: JobStats
    dead_letters: list[dict]
    removed: list[dict]
    own_ids: list | None = None
    tokenized: bool = True
    buckets: list[str] | None = None
    bucket_stats: dict[str, JobStats] = dataclasses.field(default_factory=dict)

    def unkeep(self, i: int) -> SubsetStats:
        """Leave out document i, counted as kept so far; returns its subset's counts (its bucket's lose it)."""
        s = self.stats.subsets[self.subsets[i]]
        s.kept -= 1
        s.text_bytes -= len(self.lines[i].data)
        if self.buckets is not None:  # a bucket counts only what it holds
            b = self.bucket_stats[self.buckets[i]].subsets[self.subsets[i]]
            b.documents -= 1
            b.kept -= 1
            b.text_bytes -= len(self.lines[i].data)
        self.copies[i] = -1  # never written
        return s

    def count_written(self) -> None:
        """Add the documents written to their subsets' counts (and their buckets'): tokens, epoch copies, labels."""
        labels = self.labels or [None] * len(self.subsets)
        sizes = self.sizes.tolist() if self.tokenized else [None] * len(self.subsets)
        buckets = self.buckets or [None] * len(self.subsets)
        for subset, size, count, label, bucket in zip(self.subsets, sizes, self.copies.tolist(), labels, buckets,
                                                      strict=True):
            if count >= 0:
                self.stats.subsets[subset].add_written(size, count, label)
                if bucket is not None:
                    self.bucket_stats[bucket].subsets[subset].add_written(size, count, label)


def _rule(record: dict) -> str:
    """A removed/ record's rule: dedup's and decontamination's have none but their reason."""
    return record.get("rule", record["reason"])


def count(s: SubsetStats, outcome: policy.Outcome) -> None:
    """Add a valid document's outcome to its subset's counts (a removal's tokens come later)."""
    s.documents += 1
    if outcome.reason is not None:
        if outcome.counts_as == FILTERED:
            s.filtered[outcome.reason] = s.filtered.get(outcome.reason, 0) + 1
        else:
            s.add_removed(outcome.reason, _rule(outcome.records[0]))
        return
    s.kept += 1
    if outcome.records:  # a kept document's records are its cuts
        s.add_cut([(r["reason"], _rule(r)) for r in outcome.records])
    for stage, counts in (outcome.tally or {}).items():
        mine = s.tallies.setdefault(stage, {})
        for key, n in counts.items():
            mine[key] = mine.get(key, 0) + n


class DocumentEngine:
    """The policy and the tokenizer: work items -> Validated -> Documents (module docstring).

    `setup()` loads the tokenizer (and the stages, when they run here) once per process.
    """

    def __init__(self, config: PipelineConfig, tokenizer: TokenizerSpec, encode_threads: int | None = None):
        self._config = config
        self._special = tokenizer.special
        self.tokenizes = tokenizes(tokenizer)
        self.encoder = tokenizer.encoder(verify=config.verify_tokenizer != "off",
                                         threads=encode_threads) if self.tokenizes else None
        self._policy = config.document_policy()
        self._schema = config.schema
        self._lists_removed = config.lists_removed
        self.redaction = Redaction.of(self._policy.stages)
        self._split_by = config.split_by
        # With dedup the stages ran in its input (pipeline/beam/dedup/stage.py): their verdicts are replayed here.
        self._runs_stages = not config.dedup_enabled

    def setup(self) -> None:
        """Load the tokenizer (and the stages when they run here)."""
        if self.encoder is not None:
            self.encoder.load()
        if self._runs_stages:
            self._policy.setup()

    def dead_letter(self, chunk: Chunk, line: Line, reason: str, detail: str) -> dict:
        """The dead-letter record of a bad line (redacted with --pii)."""
        redaction = self.redaction
        record = {
            "file": redact_url(chunk.path),
            "file_index": chunk.file_index,
            "line": line.number,
            "offset": line.offset,
            "reason": reason,
            "detail": redaction.detail(detail),
            "prefix": redaction.prefix(line),
        }
        ident = documents.line_id(line, self._schema) if self._schema.id_key else None
        if ident is not None:
            record["id"] = redaction.value(ident)
        return record

    def validate(self, item: WorkItem) -> Validated:
        """The work item's lines through the document policy: texts to tokenize, dead letters, removals, counts.

        A removed document is counted per subset by reason and rule with its tokens; a cut one is
        kept with its cut text.
        """
        chunk = item.chunk
        file_stats = documents.file_stats()
        stats = JobStats(lines=len(chunk.lines), inputs={chunk.file_index: file_stats})
        dead_letters, texts, subsets, lines, labels, records, own_ids = [], [], [], [], [], [], []
        buckets: list[str] = []
        bucket_stats: dict[str, JobStats] = {}
        removed_texts, removed_of = [], []  # the texts of removed documents, (their subset's counts, outcome)
        for outcome in self._policy.decide(chunk, file_stats, item.removed, item.verdicts):
            line = outcome.line
            if outcome.bad is not None:
                stats.add_dead_letter(outcome.bad.reason)
                dead_letters.append(self.dead_letter(chunk, line, outcome.bad.reason, outcome.bad.detail))
                continue
            s = stats.subset(outcome.subset, self._lists_removed, self.tokenizes)
            count(s, outcome)
            records.extend(outcome.records)
            if outcome.counts_as == REMOVED:
                removed_texts.append(outcome.text)
                removed_of.append((s, outcome))
                continue
            if outcome.reason is not None:
                continue
            s.text_bytes += len(line.data)
            texts.append(outcome.text)
            subsets.append(outcome.subset)
            lines.append(line)
            labels.append(outcome.labels)
            own_ids.append(self.redaction.value(outcome.id))
            if self._split_by:  # its bucket, once: the stages ran once for every bucket
                bucket = bucket_of(outcome.labels, self._split_by)
                buckets.append(bucket)
                b = bucket_stats.setdefault(bucket, JobStats()).subset(outcome.subset)
                count(b, outcome)
                b.text_bytes += len(line.data)
        if removed_texts and self._lists_removed and self.tokenizes:
            self._count_removed_tokens(removed_texts, removed_of)
        records = [self.redaction.record(r) for r in records]
        return Validated(chunk, texts, lines, subsets, labels if any(labels) else None, stats, dead_letters,
                         records, own_ids if self._schema.id_key else None, buckets if self._split_by else None,
                         bucket_stats)

    def _count_removed_tokens(self, texts: list[str], removed_of: list) -> None:
        _, offsets, _ = self.encoder.encode_verified(texts)
        extra = self._special.add_bos + self._special.add_eos
        for (s, outcome), n in zip(removed_of, np.diff(offsets).tolist(), strict=True):
            s.add_removed_tokens(outcome.reason, _rule(outcome.records[0]), n + extra)

    def tokenize(self, batch: list[Validated]) -> list[Documents]:
        """The work items' kept documents, tokenized in one encoder call, each as if alone."""
        texts = [text for pending in batch for text in pending.texts]
        if self.encoder is None:
            ids, offsets, mismatches = np.zeros(0, np.int32), np.zeros(len(texts) + 1, np.int64), []
        else:
            ids, offsets, mismatches = self.encoder.encode_verified(texts)
        out, first = [], 0
        for pending in batch:
            last = first + len(pending.texts)
            own = (ids[offsets[first]:offsets[last]], offsets[first:last + 1] - offsets[first],
                   [(i - first, detail) for i, detail in mismatches if first <= i < last])
            out.append(self._documents(pending, *own))
            first = last
        return out

    def _documents(self, pending: Validated, ids: np.ndarray, offsets: np.ndarray,
                   mismatches: list[tuple[int, str]]) -> Documents:
        cfg, chunk, lines = self._config, pending.chunk, pending.lines
        copies = np.array([copies_of(cfg.epochs_of(subset), cfg.seed, chunk.file_index, line.number)
                           for subset, line in zip(pending.subsets, lines, strict=True)], np.int64)
        sizes = np.diff(offsets) + self._special.add_bos + self._special.add_eos
        docs = Documents(chunk, pending.texts, lines, pending.subsets, pending.labels, ids, offsets, sizes, copies,
                         pending.stats, pending.dead_letters, pending.removed, pending.own_ids, self.tokenizes,
                         pending.buckets, pending.bucket_stats)
        for i, detail in mismatches:  # only with --verify_tokenizer: the fast backend disagreed with the reference
            if cfg.verify_tokenizer == "fail":
                raise TokenizerMismatch(f"{redact_url(chunk.path)} line {lines[i].number}: {detail}")
            docs.unkeep(i).documents -= 1
            docs.stats.add_dead_letter("tokenizer_mismatch")
            docs.dead_letters.append(self.dead_letter(chunk, lines[i], "tokenizer_mismatch", detail))
        return docs
