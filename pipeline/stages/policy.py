"""One document policy: what every DoFn that reads documents decides about each line of a chunk.

    line -> validate (core/documents.py) --bad--> dead letter
         -> subset_not_selected, empty_text              (counted under `filtered`, never listed)
         -> the configured stages, in order, each on the text the one before left
                                                          (a removal is listed in removed/)
         -> with --dedup / --decontaminate: the chunk's removed records (`DedupVerdicts`)
         -> kept, with its text (changed or not), cut records, tallies and labels

The tokenizing stage (pipeline/beam/chunk_documents.py), the tokenizer sample
(pipeline/beam/sample.py) and dedup's input (pipeline/beam/dedup/stage.py) all call
`DocumentPolicy.decide`, so a new stage is one class in the registry and no DoFn changes.

With dedup on, the configured stages run once, in dedup's input (so that dedup sees the cleaned
text and never a document a stage removed); each document's `Verdict` (its changed text, records,
tallies, labels) travels with the chunk to the tokenizing stage, which replays the verdicts
(`decide(..., verdicts=...)`) and never sets the stages up. Running them twice would double the
cost of the most expensive part of a cleaning job (a spaCy tokenization or a language model per
document) and load their state twice per worker; carrying verdicts costs only the changed texts.
"""

from __future__ import annotations

import dataclasses

from pipeline.core import documents
from pipeline.core.documents import BadRecord, Line, Schema
from pipeline.io.inputs import Chunk
from pipeline.io.urls import redact_url
from pipeline.stages.base import FILTERED, REMOVED, Doc, DocumentStage, Keep, Remove
from pipeline.stages.rules import DedupVerdicts, EmptyText, SubsetSelection


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the configured stages decided about one document (carried to the tokenizing stage with dedup)."""

    text: str | None = None  # the text they left, when it changed
    reason: str | None = None  # the stage that left the document out (None: kept)
    counts_as: str | None = None  # that stage's REMOVED or FILTERED
    records: tuple[dict, ...] = ()  # its removed/ records: the removal, or the kept document's cuts
    tally: dict | None = None  # {stage: {key: n}}
    labels: dict | None = None


@dataclasses.dataclass(slots=True)
class Outcome:
    """What the policy decided about one line.

    A dead letter has `bad` and no subset. Otherwise `text` is the text to tokenize (kept) or the
    text that was left out; `reason` None means kept; `records` are its removed/ records (the
    removal, or a kept document's cuts); `verdict` is the configured stages' part (None: untouched).
    """

    line: Line
    subset: str | None = None
    text: str | None = None
    bad: BadRecord | None = None
    reason: str | None = None
    counts_as: str | None = None
    records: tuple[dict, ...] = ()
    tally: dict | None = None
    labels: dict | None = None
    id: str | int | None = None
    verdict: Verdict | None = None

    @property
    def kept(self) -> bool:
        """A valid document no rule or stage left out."""
        return self.bad is None and self.reason is None

    @property
    def removed(self) -> bool:
        """Left out and listed in removed/ (a stage's or dedup's removal)."""
        return self.counts_as == REMOVED

    def cut_reasons(self) -> list[str]:
        """The reasons of a kept document's cut records."""
        return [r["reason"] for r in self.records] if self.records and self.kept else []


class DocumentPolicy:
    """Validate, select, the configured stages, dedup's verdicts: one chunk at a time (module docstring).

    schema, max_line_bytes: validation's (core/documents.py). selected: `subset in selected` (a set,
    a `subsets.Selection`). stages: the configured stages, in order (instances, options given).
    """

    def __init__(self, schema: Schema, max_line_bytes: int, selected, stages: tuple[DocumentStage, ...] = ()):
        self.schema = schema
        self.max_line_bytes = max_line_bytes
        self.rules = (SubsetSelection(selected), EmptyText())
        self.stages = tuple(stages)
        self._set_up = False

    @property
    def lists_removed(self) -> bool:
        """Whether a configured stage lists its removals in removed/."""
        return any(stage.counts_as == REMOVED for stage in self.stages)

    def setup(self) -> None:
        """Load the stages' heavy state; once per worker (a DoFn's `setup`), before `decide` runs them."""
        if not self._set_up:
            for stage in self.stages:
                stage.setup()
            self._set_up = True

    def decide(self, chunk: Chunk, file_stats: dict | None = None, removed: dict | None = None,
               verdicts: dict | None = None) -> list[Outcome]:
        """One Outcome per line of the chunk, in order.

        file_stats: validation's counts (`documents.file_stats()`), added to. removed: with dedup, the
        chunk's removed records by line. verdicts: with dedup, the configured stages' verdicts by line
        (from `decide` in dedup's input): replayed instead of running the stages.
        """
        stats = documents.file_stats() if file_stats is None else file_stats
        max_line_bytes, schema, rules, validate = self.max_line_bytes, self.schema, self.rules, documents.validate
        outcomes, alive = [], []
        for line in chunk.lines:
            try:
                doc = validate(line, max_line_bytes, schema, stats)
            except BadRecord as bad:
                outcomes.append(Outcome(line, bad=bad))
                continue
            text, subset = doc.text, doc.subset
            outcome = Outcome(line, subset, text, id=doc.id)
            outcomes.append(outcome)
            for rule in rules:
                reason = rule.reason(text, subset)
                if reason is not None:
                    outcome.reason, outcome.counts_as = reason, FILTERED
                    break
            else:
                alive.append(outcome)
        if verdicts is not None:
            for outcome in alive:
                verdict = verdicts.get(outcome.line.number)
                if verdict is not None:
                    _replay(outcome, verdict)
        elif self.stages:
            if not self._set_up:
                raise RuntimeError("DocumentPolicy.setup() must run before decide() runs its stages")
            self._run_stages(chunk, alive)
        if removed:
            for outcome in alive:
                record = removed.get(outcome.line.number)
                if record is not None and outcome.reason is None:
                    _apply_dedup(outcome, record)
        return outcomes

    def _run_stages(self, chunk: Chunk, alive: list[Outcome]) -> None:
        touched: dict[int, Outcome] = {}
        original = {id(o): o.text for o in alive}
        for stage in self.stages:
            docs = [Doc(o.text, o.subset, chunk.file_index, o.line.number, o.line) for o in alive]
            if not docs:
                break
            results = stage.apply_many(docs)
            if len(results) != len(docs):
                raise RuntimeError(f"stage {stage.name}: apply_many returned {len(results)} verdicts "
                                   f"for {len(docs)} documents")
            still = []
            for outcome, result in zip(alive, results, strict=True):
                if result is None:
                    still.append(outcome)
                    continue
                touched[id(outcome)] = outcome
                if isinstance(result, Remove):
                    outcome.reason, outcome.counts_as = stage.name, stage.counts_as
                    # A removed document is listed once, by its removal (no earlier cut of it).
                    outcome.records = ((_record(chunk, outcome, stage.name, result.rule, result.fields),)
                                       if stage.counts_as == REMOVED else ())
                elif isinstance(result, Keep):
                    _keep(chunk, outcome, stage, result)
                    still.append(outcome)
                else:
                    raise TypeError(f"stage {stage.name}: apply returned {type(result).__name__}; "
                                    "expected Remove, Keep or None")
            alive[:] = still
        for outcome in touched.values():
            text = outcome.text if outcome.text is not original[id(outcome)] else None
            outcome.verdict = Verdict(text, outcome.reason, outcome.counts_as, outcome.records,
                                      outcome.tally, outcome.labels)


def _keep(chunk: Chunk, outcome: Outcome, stage: DocumentStage, result: Keep) -> None:
    if result.text is not None:
        outcome.text = result.text
    if result.cut_rule is not None:
        outcome.records = (*outcome.records, _record(chunk, outcome, stage.cut_reason, result.cut_rule, result.fields))
    if result.tally:
        mine = dict((outcome.tally or {}).get(stage.name, {}))
        for key, n in result.tally.items():
            mine[key] = mine.get(key, 0) + n
        outcome.tally = {**(outcome.tally or {}), stage.name: mine}
    if result.labels:
        outcome.labels = {**(outcome.labels or {}), **result.labels}


def _record(chunk: Chunk, outcome: Outcome, reason: str, rule: str, fields) -> dict:
    record = {"file": redact_url(chunk.path), "file_index": chunk.file_index, "line": outcome.line.number,
              "subset": outcome.subset, "reason": reason, "rule": rule, **fields}
    if outcome.id is not None:
        record["id"] = outcome.id
    return record


def _replay(outcome: Outcome, verdict: Verdict) -> None:
    if verdict.text is not None:
        outcome.text = verdict.text
    outcome.reason, outcome.counts_as = verdict.reason, verdict.counts_as
    outcome.records = verdict.records
    outcome.tally, outcome.labels, outcome.verdict = verdict.tally, verdict.labels, verdict


def _apply_dedup(outcome: Outcome, record: dict) -> None:
    if DedupVerdicts.is_cut(record):
        outcome.text = DedupVerdicts.cut_text(outcome.text, record)
        outcome.records = (*outcome.records, record)
    else:
        outcome.reason, outcome.counts_as, outcome.records = record["reason"], REMOVED, (record,)


def count(subset_counts: dict, outcome: Outcome) -> None:
    """Add a valid document's outcome to its subset's counts (the job's per-subset shape).

    documents always; kept, or filtered / removed by reason; cut and cut_by_reason for a kept
    document with cut records; tallies by stage. (text_bytes, tokens, removed_tokens and labels are
    the tokenizing stage's, which knows the bytes and tokens.)
    """
    s = subset_counts
    s["documents"] += 1
    if outcome.reason is not None:
        bucket = s["filtered"] if outcome.counts_as == FILTERED else s.setdefault("removed", {})
        bucket[outcome.reason] = bucket.get(outcome.reason, 0) + 1
        return
    s["kept"] += 1
    if outcome.records:  # a kept document's records are its cuts
        s["cut"] = s.get("cut", 0) + 1
        by_reason = s.setdefault("cut_by_reason", {})
        for record in outcome.records:
            by_reason[record["reason"]] = by_reason.get(record["reason"], 0) + 1
    if outcome.tally:
        tallies = s.setdefault("tallies", {})
        for stage, counts in outcome.tally.items():
            mine = tallies.setdefault(stage, {})
            for key, n in counts.items():
                mine[key] = mine.get(key, 0) + n
