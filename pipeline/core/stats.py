"""What the job counts, typed: per subset, packing and the job's totals, merged by a method.

A work item's processing (pipeline/process/) returns a `JobStats`; the job sums them (`merge_stats`,
a Beam combine) and the manifest takes its parts from the sum (pipeline/beam/manifest.py places
them). Each class's `to_json` is that part's manifest form, written here only; `from_json` reads it
back (and the read stage's `{"inputs": {...}}` dicts).

A field is in the manifest form always, once set (`None` until then: a subset's `tokens` appear once
one of its documents is written, `removed` when the job lists removals), or once non-zero (`cut`,
`rules`, `labels`, ...), so that a job that counts nothing new keeps its manifest's bytes.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable

from pipeline.core.content import digest_hex, from_limbs

ALWAYS, ONCE_SET, NON_ZERO = "always", "once set", "non-zero"


def merge_into(total: dict, part: dict) -> dict:
    """Add `part` into `total` recursively: numbers add, dicts merge, other values must agree (first kept)."""
    for key, value in part.items():
        if isinstance(value, dict):
            merge_into(total.setdefault(key, {}), value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            total.setdefault(key, value)
        else:
            total[key] = total.get(key, 0) + value
    return total


def sorted_dict(value):
    """Sort dict keys recursively so that the manifest is byte-identical between runs."""
    if isinstance(value, dict):
        return {k: sorted_dict(value[k]) for k in sorted(value)}
    return value


def counted(default, shown: str):
    """A counts field: its default (0, None or {}) and when its manifest form shows it (ALWAYS, ONCE_SET, NON_ZERO)."""
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata={"shown": shown})
    return dataclasses.field(default=default, metadata={"shown": shown})


def _sum(mine, theirs):
    """`theirs` added to `mine` (changed in place where it is a dict or a counts object; `theirs` never)."""
    if theirs is None:
        return mine
    if isinstance(theirs, Counts):
        return (type(theirs)() if mine is None else mine).merge(theirs)
    if isinstance(theirs, dict):
        mine = {} if mine is None else mine
        for key, value in theirs.items():
            mine[key] = _sum(mine.get(key), value)
        return mine
    if mine is None:
        return theirs
    if isinstance(theirs, bool) or not isinstance(theirs, int | float):
        return mine  # a file's path: the same in every part
    return mine + theirs


class Counts:
    """A dataclass of counts: `merge` adds another's; `to_json` / `from_json` as its fields' `shown` say."""

    def merge(self, other):
        """Add `other`'s counts to these (returns self)."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, _sum(getattr(self, f.name), getattr(other, f.name)))
        return self

    def to_json(self) -> dict:
        """The manifest form: each field shown as its `shown` says (module docstring); a copy."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = f.metadata["shown"]
            if value is None or (shown == NON_ZERO and not value):
                continue
            out[f.name] = copy.deepcopy(value)
        return out

    @classmethod
    def from_json(cls, data: dict):
        """The counts of a `to_json` form (unknown keys refused)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown keys {unknown}")
        return cls(**copy.deepcopy(data))


@dataclasses.dataclass
class SubsetStats(Counts):
    """What the job counted of one subset's valid documents (the manifest's `subsets[<name>]`).

    documents: valid lines; kept: written; filtered: left out by reason, not listed (subset not
    selected, empty text, a filtering stage); removed / removed_tokens: listed in removed/, by
    reason, with the tokens they would have had (BOS/EOS included); rules: the same by reason and
    rule ({"documents", "tokens"}); cut / cut_by_reason / cut_rules: kept documents with cut
    records; tallies: a stage's counts ({stage: {key: n}}); labels: written documents and their
    tokens by label ({key: {value: {"documents", "tokens"}}}); padding_labels / documents_cut:
    best_fit's packing.
    """

    documents: int = counted(0, ALWAYS)
    kept: int = counted(0, ALWAYS)
    filtered: dict = counted({}, ALWAYS)
    text_bytes: int = counted(0, ALWAYS)
    tokens: int | None = counted(None, ONCE_SET)
    tokens_with_epochs: int | None = counted(None, ONCE_SET)
    removed: dict | None = counted(None, ONCE_SET)
    removed_tokens: dict | None = counted(None, ONCE_SET)
    rules: dict = counted({}, NON_ZERO)
    cut: int = counted(0, NON_ZERO)
    cut_by_reason: dict = counted({}, NON_ZERO)
    cut_rules: dict = counted({}, NON_ZERO)
    tallies: dict = counted({}, NON_ZERO)
    labels: dict = counted({}, NON_ZERO)
    padding_labels: int | None = counted(None, ONCE_SET)
    documents_cut: int | None = counted(None, ONCE_SET)

    def add_written(self, tokens: int | None, copies: int, labels: dict | None) -> None:
        """One document written: its tokens (one copy, BOS/EOS included; None: not tokenized), copies, labels."""
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens
            self.tokens_with_epochs = (self.tokens_with_epochs or 0) + copies * tokens
        for key, value in (labels or {}).items():
            entry = self.labels.setdefault(key, {}).setdefault(str(value), {"documents": 0} if tokens is None else
                                                               {"documents": 0, "tokens": 0})
            entry["documents"] += 1
            if tokens is not None:
                entry["tokens"] += tokens

    def add_removed(self, reason: str, rule: str) -> None:
        """One document listed in removed/ (its tokens added once they are known: `add_removed_tokens`)."""
        self.removed = self.removed if self.removed is not None else {}
        self.removed[reason] = self.removed.get(reason, 0) + 1
        counts = {"documents": 0} if self.removed_tokens is None else {"documents": 0, "tokens": 0}
        entry = self.rules.setdefault(reason, {}).setdefault(rule, counts)
        entry["documents"] += 1

    def add_removed_tokens(self, reason: str, rule: str, tokens: int) -> None:
        """Tokens of a removed document, under its reason and rule."""
        if self.removed_tokens is None:
            return
        self.removed_tokens[reason] = self.removed_tokens.get(reason, 0) + tokens
        self.rules[reason][rule]["tokens"] += tokens

    def add_cut(self, reasons_and_rules: list[tuple[str, str]]) -> None:
        """A kept document with cut records: one (reason, rule) per record."""
        self.cut += 1
        for reason, rule in reasons_and_rules:
            self.cut_by_reason[reason] = self.cut_by_reason.get(reason, 0) + 1
            entry = self.cut_rules.setdefault(reason, {}).setdefault(rule, {"documents": 0})
            entry["documents"] += 1


@dataclasses.dataclass
class PackingStats(Counts):
    """The TFRecord output's packing counts (the manifest's `packing`, beside its policy); each once set."""

    records_from_chunks: int | None = counted(None, ONCE_SET)
    records_from_tails: int | None = counted(None, ONCE_SET)
    padding_labels: int | None = counted(None, ONCE_SET)
    documents_cut: int | None = counted(None, ONCE_SET)
    padded_records: int | None = counted(None, ONCE_SET)
    remainder_labels: int | None = counted(None, ONCE_SET)
    dropped_labels: int | None = counted(None, ONCE_SET)


def _input_key(file_index: int) -> str:
    return f"{file_index:05d}"


@dataclasses.dataclass
class JobStats(Counts):
    """What a work item, or the job, counted.

    subsets: per subset name; dead_letters: bad lines by reason; lines: lines read; inputs: per input
    file index, the read stage's counts (path, lines, decompressed_bytes, chunks, damaged, content:
    the summed terms of pipeline/core/content.py, as its `limbs`) and validation's (core/documents.py `file_stats`);
    packing: the TFRecord output's; removed_files: the removed/ files written, by path; work: the
    work items (chunks) this run processed and those it reused from the run it resumes
    ({"processed": n, "reused": m}).
    """

    subsets: dict = counted({}, NON_ZERO)
    dead_letters: dict = counted({}, NON_ZERO)
    lines: int = counted(0, NON_ZERO)
    inputs: dict = counted({}, NON_ZERO)
    packing: PackingStats | None = counted(None, ONCE_SET)
    removed_files: dict = counted({}, NON_ZERO)
    work: dict = counted({}, NON_ZERO)

    def subset(self, name: str, lists_removed: bool = False, tokens: bool = True) -> SubsetStats:
        """The counts of subset `name`, created at zero (with `lists_removed`, its removals; `tokens`: their tokens)."""
        s = self.subsets.get(name)
        if s is None:
            s = self.subsets[name] = SubsetStats(removed={} if lists_removed else None,
                                                 removed_tokens={} if lists_removed and tokens else None)
        return s

    def add_dead_letter(self, reason: str) -> None:
        """One bad line."""
        self.dead_letters[reason] = self.dead_letters.get(reason, 0) + 1

    def to_json(self) -> dict:
        """The JSON form: each part in its manifest form; inputs keyed by the 5-digit file index."""
        out = super().to_json()
        if "subsets" in out:
            out["subsets"] = {name: s.to_json() for name, s in self.subsets.items()}
        if "inputs" in out:
            out["inputs"] = {_input_key(i): dict(v) for i, v in self.inputs.items()}
        if "packing" in out:
            out["packing"] = self.packing.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict) -> JobStats:
        """The stats of a `to_json` form, or of a read stage's `{"inputs": {"00003": {...}}}`."""
        data = dict(data)
        subsets = {name: SubsetStats.from_json(s) for name, s in data.pop("subsets", {}).items()}
        inputs = {int(key): copy.deepcopy(v) for key, v in data.pop("inputs", {}).items()}
        packing = data.pop("packing", None)
        stats = super().from_json(data)
        stats.subsets, stats.inputs = subsets, inputs
        stats.packing = None if packing is None else PackingStats.from_json(packing)
        return stats

    @classmethod
    def of(cls, part: JobStats | dict) -> JobStats:
        """`part` as JobStats (a dict: its JSON form, as the read stage emits)."""
        return part if isinstance(part, JobStats) else cls.from_json(part)

    def manifest_subsets(self) -> dict:
        """The manifest's `subsets` (before the job adds each one's epochs and selection)."""
        return {name: s.to_json() for name, s in self.subsets.items()}

    def manifest_inputs(self, defaults: dict) -> list[dict]:
        """The manifest's `inputs`: each file's counts over `defaults` (validation's, at zero), by file index.

        The summed content terms show as `content_digest` (32 hex digits).
        """
        entries = [merge_into(copy.deepcopy(defaults), self.inputs[i]) for i in sorted(self.inputs, key=_input_key)]
        for entry in entries:
            if "content" in entry:
                entry["content_digest"] = digest_hex(from_limbs(entry.pop("content")))
        return entries

    def manifest_packing(self) -> dict:
        """The packing counts of the manifest's `packing` (those set)."""
        return self.packing.to_json() if self.packing is not None else {}


def merge_stats(parts: Iterable[JobStats | dict]) -> JobStats:
    """Sum work items' stats (usable as `beam.CombineGlobally(merge_stats)`); a dict is read as JSON form."""
    total = JobStats()
    for part in parts:
        total.merge(JobStats.of(part))
    return total
