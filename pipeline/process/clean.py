"""One document (a dict) through the stages, for `CleanDocuments` (pipeline/beam/clean.py): the kept dict and records.

    document -> Cleaner.clean -> Cleaned: the kept document (None: removed) + removal and cut records

The stages run in the order given, each on the text the one before left, the first that removes a
document giving the reason. A kept document is the input dict with its text replaced when a stage
changed it (and `labels` added when a stage labelled it). A record is {"reason": stage, "rule",
"subset", its fields, "document": the input dict}; with the pii stage among the stages, every
string of a record is redacted as the job's are (pipeline/process/redaction.py).
"""

from __future__ import annotations

import dataclasses

from pipeline.core.documents import Line
from pipeline.process.redaction import Redaction
from pipeline.stages.base import Doc, DocumentStage, Keep, Remove


def _get(document: dict, path: str):
    value = document
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _with(document: dict, path: str, value) -> dict:
    """A copy of the document with the value at a dotted path replaced (the dicts on the way copied)."""
    head, _, rest = path.partition(".")
    out = dict(document)
    out[head] = _with(out.get(head) or {}, rest, value) if rest else value
    return out


@dataclasses.dataclass
class Cleaned:
    """A document's outcome: the kept document (None when a stage removed it) and its records."""

    kept: dict | None
    records: list[dict]


class Cleaner:
    """The stages on documents in a given layout (`text_key`, `subset_key`: dotted paths)."""

    def __init__(self, stages: tuple[DocumentStage, ...], text_key: str = "text",
                 subset_key: str = "meta.pile_set_name"):
        self._stages, self._text_key, self._subset_key = tuple(stages), text_key, subset_key
        self._redaction = Redaction.of(self._stages)

    def setup(self) -> None:
        """The stages' heavy state, once per process."""
        for stage in self._stages:
            stage.setup()

    def clean(self, document: dict) -> Cleaned:
        """One document through the stages."""
        text, subset = _get(document, self._text_key), _get(document, self._subset_key)
        if not isinstance(text, str):
            raise ValueError(f"CleanDocuments: a document without a text string at {self._text_key!r}")
        records, labels = [], {}
        raw = Line(0, 0, b"", row=document)  # the whole document, for a stage that reads another field (a URL)
        for stage in self._stages:
            verdict = stage.apply(Doc(text, str(subset), 0, 0, raw))
            if isinstance(verdict, Remove):
                return Cleaned(None, [self._record(stage.name, verdict.rule, subset, verdict.fields, document)])
            if isinstance(verdict, Keep):
                if verdict.cut_rule is not None:
                    records.append(self._record(stage.cut_reason, verdict.cut_rule, subset, verdict.fields, document))
                if verdict.text is not None:
                    text = verdict.text
                labels.update(verdict.labels)
        kept = dict(document)
        if text is not _get(document, self._text_key):
            kept = _with(kept, self._text_key, text)
        if labels:
            kept["labels"] = {**kept.get("labels", {}), **labels}
        return Cleaned(kept, records)

    def _record(self, reason: str, rule: str, subset, fields, document: dict) -> dict:
        return self._redaction.record({"reason": reason, "rule": rule, "subset": subset, **fields,
                                       "document": document})
