"""With --pii on, what the job writes about a document holds no address the pii stage replaces.

The stage redacts the text the job writes (pipeline/stages/pii.py); this module gives every other
record the same redaction, through the stage's own function: dead letters (their prefix, detail and
id), removed/ records (every field a stage or dedup set, and the id). Left as they are: the input
locations (`file`, `twin_file`) and the subset name, which the manifest lists as given.

A dead letter's prefix is cut from a redacted window of the line PREFIX_MARGIN characters longer,
so that an address across the prefix's end is replaced whole rather than cut to a part the
patterns no longer match.
"""

from __future__ import annotations

from pipeline.core.documents import PREFIX_CHARS, Line, line_prefix
from pipeline.stages.base import DocumentStage
from pipeline.stages.pii import Pii, redact

KEPT_AS_GIVEN = frozenset({"file", "twin_file", "subset"})  # locations and subset names, as the manifest has them
PREFIX_MARGIN = 320  # characters past the prefix redacted with it: longer than any e-mail address (254)
DETAIL_CHARS = 200  # characters of a dead letter's detail


class Redaction:
    """The pii stage's redaction for the job's records; does nothing when the stage is off."""

    def __init__(self, kinds: tuple[str, ...] = ()):
        self.kinds = tuple(kinds)

    @classmethod
    def of(cls, stages: tuple[DocumentStage, ...]) -> Redaction:
        """The redaction of the pii stage among `stages` (none: a Redaction that changes nothing)."""
        for stage in stages:
            if isinstance(stage, Pii):
                return cls(stage.options.pii)
        return cls()

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def text(self, text: str) -> str:
        """`text` with the addresses replaced."""
        return redact(text, self.kinds)[0] if self.kinds else text

    def value(self, value):
        """Every string in a JSON value (nested lists and dicts) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def record(self, record: dict) -> dict:
        """A record to write, every field redacted but KEPT_AS_GIVEN (the same dict when off)."""
        if not self.kinds:
            return record
        return {k: v if k in KEPT_AS_GIVEN else self.value(v) for k, v in record.items()}

    def prefix(self, line: Line) -> str:
        """A dead letter's `prefix` of `line` (core/documents.py `line_prefix`), redacted."""
        if not self.kinds:
            return line_prefix(line)
        window = PREFIX_CHARS + PREFIX_MARGIN
        text = line.data[: window * 4].decode("utf-8", errors="backslashreplace")[:window]
        return self.text(text)[:PREFIX_CHARS]

    def detail(self, detail: str) -> str:
        """A dead letter's `detail`, redacted whole, then cut to DETAIL_CHARS."""
        return self.text(detail)[:DETAIL_CHARS]
