"""Removed (and cut) documents with their text: records selected, read back from the inputs, decided again.

    removed/ records --select (reason, rule, subset), --sample--> records to show
      -> per input file: its lines read back (pipeline/inspect/readback.py: the whole file, counts checked)
      -> decided again by the run's policy (pipeline/inspect/replay.py: records checked, cut texts made)
      -> Shown(record, document)

One input file at a time: without a sample, memory holds one input's records and the documents shown
from it; with one, the sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from pipeline.inspect.output import Output, rule_of
from pipeline.inspect.readback import read_input
from pipeline.inspect.replay import Decided, Replay
from pipeline.inspect.select import Selection, check_known, sample

# A record's own keys; every other field is what its stage or dedup adds (the deciding value, a twin).
OWN_KEYS = frozenset({"file", "file_index", "line", "subset", "reason", "rule", "id"})


@dataclasses.dataclass(frozen=True)
class Shown:
    """One removed/ record and its document, read back and decided again."""

    record: dict
    document: Decided
    path: str  # the input, as the manifest shows it

    @property
    def fields(self) -> dict:
        """What the record adds to its own keys: the deciding value (and threshold), dedup's twin, ..."""
        return {k: v for k, v in self.record.items() if k not in OWN_KEYS}

    @property
    def is_cut(self) -> bool:
        """A cut: the document was kept, with `document.text` as its text."""
        return self.document.cut


def known_values(output: Output) -> dict[str, set[str]]:
    """The reasons, rules and subsets of the output's records (the manifest's where it counts them)."""
    removed = output.require_removed()
    reasons = set(removed.get("by_reason", {})) | set(removed.get("cut_by_reason", {}))
    rules = {rule for block in ("rules", "cut_rules") for by_rule in removed.get(block, {}).values()
             for rule in by_rule}
    if not rules:
        rules = {rule_of(r) for r in output.records()} - {""}
    return {"reason": reasons, "rule": rules, "subset": set(output.manifest.get("subsets", {}))}


def check_selection(output: Output, selection: Selection) -> None:
    """UsageError naming the flag for a reason or subset the output does not have (rules: once records are read)."""
    removed = output.require_removed()
    check_known("reason", selection.reasons, set(removed.get("by_reason", {})) | set(removed.get("cut_by_reason", {})))
    check_known("subset", selection.subsets, output.manifest.get("subsets", {}))
    if "rules" in removed and selection.rules:
        check_known("rule", selection.rules, known_values(output)["rule"])


def removed_documents(output: Output, selection: Selection, n: int | None = None, seed: int = 0,
                      per_rule: bool = False) -> Iterator[Shown]:
    """The selected records with their documents, in (file, line) order; `n`: a sample of that many (of each rule)."""
    check_selection(output, selection)
    replay = Replay(output.manifest)
    if n is not None:
        chosen = sample((r for r in output.records() if selection.matches(r)), n, seed, per_rule)
        by_file: dict[int, list[dict]] = {}
        for record in chosen:
            by_file.setdefault(record["file_index"], []).append(record)
        groups = iter(sorted(by_file.items()))
    else:
        files = sorted({f.file_index for f in output.removed_files()})
        groups = ((i, [r for r in output.records(i) if selection.matches(r)]) for i in files)
    for file_index, records in groups:
        if records:
            yield from _read_back(output, replay, file_index, records)


def _read_back(output: Output, replay: Replay, file_index: int, records: list[dict]) -> Iterator[Shown]:
    """The records of one input file with their documents (every record of their lines decides again)."""
    wanted = {r["line"] for r in records}
    by_line: dict[int, list[dict]] = {}
    for record in output.records(file_index):
        if record["line"] in wanted:
            by_line.setdefault(record["line"], []).append(record)
    entry = output.inputs[file_index]
    lines = read_input(entry, output.config, wanted)
    decided = {d.line: d for d in replay.decide(file_index, entry["path"], lines, by_line)}
    for record in records:
        yield Shown(record, decided[record["line"]], entry["path"])


def nothing_matched(output: Output, selection: Selection) -> str:
    """The line for a selection no record matches (a UsageError for a rule the output does not have)."""
    check_known("rule", selection.rules, known_values(output)["rule"])
    return f"no removed document of {output.shown} matches {selection.describe()}"
