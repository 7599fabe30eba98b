"""One input line -> a document (text, subset) or a reason code for the dead-letter output.

Validation is pure (bytes in, values out) and runs after the fan-out, on the workers. Every reason
code is stable: it names the dead-letter files' `reason` field and the manifest's counts.

A line that validates is a document; a document is then kept, or filtered with a reason
(`filter_reason`): not among the selected subsets, or empty.
"""

from __future__ import annotations

import dataclasses
import json
import re

from pipeline.core.subsets import PILE_SUBSETS

PREFIX_CHARS = 120  # characters of a bad line kept in its dead-letter record
_KNOWN_SUBSETS = frozenset(PILE_SUBSETS)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Lone surrogates can only come from JSON \u escapes: scan the raw bytes first (8x cheaper).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
NOT_SELECTED = "subset_not_selected"
EMPTY_TEXT = "empty_text"


@dataclasses.dataclass(frozen=True)
class Line:
    """One raw line: 1-based number, byte offset in the decompressed stream, the bytes.

    `oversized` is the full length of a line longer than the limit; then `data` is only its start.
    """

    number: int
    offset: int
    data: bytes
    oversized: int = 0


class BadRecord(ValueError):
    """A line that is not a valid Pile document; `reason` is a stable code for dead letters."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_line(line: Line, max_line_bytes: int) -> tuple[str, str]:
    """Validate one line as a Pile document; returns (text, pile_set_name) or raises BadRecord."""
    if line.oversized:
        raise BadRecord("line_too_long", f"{line.oversized} bytes > max_line_bytes={max_line_bytes}")
    data = line.data[:-1] if line.data.endswith(b"\r") else line.data
    try:
        text_of_line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRecord("invalid_utf8", str(e)) from None
    if not text_of_line.strip():
        raise BadRecord("blank_line", "line is empty or whitespace")
    try:
        obj = json.loads(text_of_line)
    except json.JSONDecodeError as e:
        raise BadRecord("invalid_json", str(e)) from None
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object", f"JSON {type(obj).__name__}, expected an object")
    if "text" not in obj:
        raise BadRecord("text_missing", "no `text` field")
    text = obj["text"]
    if not isinstance(text, str):
        raise BadRecord("text_not_string", f"`text` is {type(text).__name__}")
    if _SURROGATE_ESCAPE.search(data) and _SURROGATE.search(text):
        raise BadRecord("invalid_unicode", "`text` holds a lone surrogate escape (not encodable as UTF-8)")
    meta = obj.get("meta")
    if meta is None:
        raise BadRecord("meta_missing", "no `meta` object")
    if not isinstance(meta, dict):
        raise BadRecord("meta_not_object", f"`meta` is {type(meta).__name__}")
    subset = meta.get("pile_set_name")
    if subset is None:
        raise BadRecord("subset_missing", "no `meta.pile_set_name`")
    if subset not in _KNOWN_SUBSETS:
        raise BadRecord("subset_unknown", f"`meta.pile_set_name` {str(subset)[:60]!r} is not a Pile subset")
    return text, subset


def line_prefix(line: Line) -> str:
    """A short, printable start of a line for a dead-letter record."""
    return line.data[: PREFIX_CHARS * 4].decode("utf-8", errors="backslashreplace")[:PREFIX_CHARS]


def filter_reason(text: str, subset: str, selected: frozenset[str]) -> str | None:
    """Why a valid document is left out (NOT_SELECTED, EMPTY_TEXT), or None when it is kept."""
    if subset not in selected:
        return NOT_SELECTED
    if not text.strip():
        return EMPTY_TEXT
    return None
