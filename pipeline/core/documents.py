"""One input line -> a document (text, subset) or a reason code for the dead-letter output.

Validation is pure (bytes in, values out) and runs after the fan-out, on the workers. Every reason
code is stable: it names the dead-letter files' `reason` field and the manifest's counts.

Where a line keeps its text and its subset name is a `Schema` (the Pile's by default:
`{"text": ..., "meta": {"pile_set_name": ...}}`). Whatever a line holds, validating it either
returns a document or raises `BadRecord`: any JSON type in any field, nesting too deep for the
parser, numbers too long to convert, an exception nobody foresaw; never anything that stops the job.

Two rules about a line's shape, the same for every schema:
- A UTF-8 byte-order mark at the start of a file (line 1, offset 0) is dropped before parsing: it is
  an encoding marker, not data (`has_byte_order_mark` lets the caller count it).
- Duplicate keys: a key repeated in an object on the path to the text or the subset name makes the
  line ambiguous (which value is meant?): a dead letter, `duplicate_key`. A key repeated anywhere
  else does not change what is read; the last value wins (as in Python's json) and the document
  reports it (`Document.duplicate_keys_elsewhere`) so that it is counted.

A line that validates is a document; what is then kept is the document policy's to decide
(pipeline/stages/policy.py). With `Schema.id_key`, a document carries the user's own id (a string
of at most MAX_ID_CHARS characters or an integer found there; anything else is no id), which the
job copies into its removed/ and dead-letter records.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import re
import threading

import orjson

from pipeline.core.subsets import PILE_SUBSETS, subset_name_problem

PREFIX_CHARS = 120  # characters of a bad line kept in its dead-letter record
BYTE_ORDER_MARK = b"\xef\xbb\xbf"
_KNOWN_SUBSETS = frozenset(PILE_SUBSETS)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Lone surrogates can only come from JSON \u escapes: scan the raw bytes first (far cheaper).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# Where a key can end: a quote, JSON whitespace, a colon (`_key_ends` drops escaped quotes).
_KEY_END = re.compile(rb'"[ \t\r\n]*:')
_BACKSLASH = 0x5C
MAX_ID_CHARS = 256  # a longer --id_key value is no id: records stay small whatever a line holds


@dataclasses.dataclass(frozen=True)
class Line:
    """One raw line: 1-based number, byte offset in the decompressed stream, the bytes.

    `oversized` is the full length of a line longer than the limit; then `data` is only its start.
    `input_end`: bytes of the (compressed) file read when the line was complete, for progress.
    `row`: a columnar row holding a value JSON cannot (pipeline/io/columnar.py), validated as it is;
    then `data` is only its printable form.
    """

    number: int
    offset: int
    data: bytes
    oversized: int = 0
    input_end: int = 0
    row: dict | None = None


@dataclasses.dataclass(frozen=True)
class Schema:
    """Where a line keeps its text and its subset name, and which names are accepted.

    text_key, subset_key: dotted paths into the line's JSON object (`meta.pile_set_name`).
    default_subset: the subset of a line without one (missing, null or ""); None: a dead letter.
    any_names: accept any subset name; otherwise only the Pile's 22 (others: `subset_unknown`).
    id_key: a dotted path to the document's own id (None: none is read).
    extra_keys: (flag, dotted path) of each other value a stage reads from the line (`--url_key`):
    a columnar input's rows carry those columns too (pipeline/io/columnar.py); a JSON line has them.
    """

    text_key: str = "text"
    subset_key: str = "meta.pile_set_name"
    default_subset: str | None = None
    any_names: bool = False
    id_key: str | None = None
    extra_keys: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        keys = (("--text_key", self.text_key), ("--subset_key", self.subset_key))
        if self.id_key is not None:
            keys += (("--id_key", self.id_key),)
        keys += tuple(self.extra_keys)
        for flag, key in keys:
            if not key or any(not part for part in key.split(".")):
                raise ValueError(f"{flag} {key!r}: give a key, or a dotted path of keys (meta.pile_set_name)")
        if self.text_key == self.subset_key:
            raise ValueError(f"--text_key and --subset_key are both {self.text_key!r}")
        if self.id_key in (self.text_key, self.subset_key):
            raise ValueError(f"--id_key {self.id_key!r} is also --text_key or --subset_key: name the id's own key")
        for flag, key in self.extra_keys:
            if key in (self.text_key, self.subset_key):
                raise ValueError(f"{flag} {key!r} is also --text_key or --subset_key: name its own key")
        if self.default_subset is not None:
            problem = subset_name_problem(self.default_subset, self.any_names)
            if problem:
                raise ValueError(f"--default_subset: {problem}")

    @functools.cached_property
    def text_path(self) -> tuple[str, ...]:
        """The text's key path."""
        return tuple(self.text_key.split("."))

    @functools.cached_property
    def subset_path(self) -> tuple[str, ...]:
        """The subset name's key path."""
        return tuple(self.subset_key.split("."))

    @functools.cached_property
    def id_path(self) -> tuple[str, ...]:
        """The id's key path (empty without an id_key)."""
        return tuple(self.id_key.split(".")) if self.id_key else ()

    @functools.cached_property
    def extra_paths(self) -> tuple[tuple[str, ...], ...]:
        """The key paths of `extra_keys`, in order."""
        return tuple(tuple(key.split(".")) for _, key in self.extra_keys)


PILE = Schema()


@dataclasses.dataclass(frozen=True)
class Document:
    """A valid line: its text and subset, whether a key was repeated off the paths we read, its id."""

    text: str
    subset: str
    duplicate_keys_elsewhere: bool = False
    id: str | int | None = None


class BadRecord(ValueError):
    """A line that is not a valid document; `reason` is a stable code for dead letters."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def has_byte_order_mark(line: Line) -> bool:
    """Whether the line starts its file with a UTF-8 byte-order mark (dropped by `parse_document`)."""
    return line.offset == 0 and line.data.startswith(BYTE_ORDER_MARK)


class _Repeated(dict):
    """A JSON object in which some key appeared more than once (the last value is kept)."""

    __slots__ = ("repeated",)


def _int(digits: str):
    # Python refuses to convert integers of more than 4300 digits (a ValueError); such a number in a
    # field we do not read must not cost the document, and none is a valid text or subset name.
    return int(digits) if len(digits) <= 4000 else float(digits)


class _Decoder(threading.local):
    """json's decoder with objects that repeat a key marked (one per thread: the hook keeps state)."""

    def __init__(self):
        self.repeated = False
        self.decoder = json.JSONDecoder(object_pairs_hook=self._pairs, parse_int=_int)

    def _pairs(self, pairs):
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        self.repeated = True
        marked = _Repeated(obj)
        marked.repeated = frozenset(k for k, n in collections.Counter(k for k, _ in pairs).items() if n > 1)
        return marked

    def decode(self, text: str) -> tuple[object, bool]:
        """(the value, whether any object repeated a key)."""
        self.repeated = False
        return self.decoder.decode(text), self.repeated


_DECODER = _Decoder()


def _check_unique(obj: dict, key: str, path: tuple[str, ...], depth: int) -> None:
    if isinstance(obj, _Repeated) and key in obj.repeated:
        raise BadRecord("duplicate_key", f"`{'.'.join(path[: depth + 1])}` appears more than once: ambiguous")


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _text(obj: dict, schema: Schema, raw: bytes | None) -> str:
    # raw: the line, to look for lone surrogates; None when the parser has refused them already.
    path = schema.text_path
    value = obj
    for depth, key in enumerate(path):
        if not isinstance(value, dict):
            raise BadRecord("text_missing", f"`{'.'.join(path[:depth])}` is {_kind(value)}, not an object")
        _check_unique(value, key, path, depth)
        if key not in value:
            raise BadRecord("text_missing", f"no `{'.'.join(path[: depth + 1])}` field")
        value = value[key]
    if not isinstance(value, str):
        raise BadRecord("text_not_string", f"`{schema.text_key}` is {_kind(value)}")
    # bytes.find is several times faster than the regex on the many lines without a \ud escape.
    if (raw is not None and (b"\\ud" in raw or b"\\uD" in raw) and _SURROGATE_ESCAPE.search(raw)
            and _SURROGATE.search(value)):
        raise BadRecord("invalid_unicode",
                        f"`{schema.text_key}` holds a lone surrogate escape (not encodable as UTF-8)")
    return value


def _subset(obj: dict, schema: Schema) -> str:
    path = schema.subset_path
    value = obj
    for depth, key in enumerate(path):
        where = ".".join(path[: depth + 1])
        if not isinstance(value, dict):
            raise BadRecord("meta_not_object", f"`{'.'.join(path[:depth])}` is {_kind(value)}, not an object")
        _check_unique(value, key, path, depth)
        parent, value = value, value.get(key)
        last = depth == len(path) - 1
        if value is None or (last and value == ""):
            if schema.default_subset is not None:
                return schema.default_subset
            if last:
                raise BadRecord("subset_missing", f"no `{where}`" + (" (null or empty)" if key in parent else ""))
            raise BadRecord("meta_missing", f"no `{where}` object")
    if not isinstance(value, str):
        raise BadRecord("subset_not_string", f"`{schema.subset_key}` is {_kind(value)}")
    if value in _KNOWN_SUBSETS:
        return value
    if _SURROGATE.search(value):
        raise BadRecord("invalid_unicode", f"`{schema.subset_key}` holds a lone surrogate escape")
    problem = subset_name_problem(value, schema.any_names)
    if problem:
        raise BadRecord("subset_invalid" if schema.any_names else "subset_unknown", f"`{schema.subset_key}`: {problem}")
    return value


def _id(obj, schema: Schema) -> str | int | None:
    """The document's own id at `schema.id_path`: a short string or an integer, else None."""
    value = obj
    for key in schema.id_path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if isinstance(value, str):
        return value if len(value) <= MAX_ID_CHARS and not _SURROGATE.search(value) else None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**MAX_ID_CHARS:
        return value
    return None


def line_id(line: Line, schema: Schema) -> str | int | None:
    """The id of a line that did not validate, when it is a JSON object holding one (for its dead letter)."""
    if not schema.id_path or line.oversized:
        return None
    if line.row is not None:
        return _id(line.row, schema)
    try:
        return _id(orjson.loads(line.data[3:] if has_byte_order_mark(line) else line.data), schema)
    except Exception:  # not JSON that orjson reads: no id
        return None


def line_field(line: Line, path: tuple[str, ...]):
    """The value at a key path of a valid line's JSON object (or columnar row); None where it has none.

    For a stage that decides on a field of the line besides its text (a URL): the line is parsed again
    only by the stages that ask.
    """
    if line.oversized:
        return None
    try:
        value = line.row if line.row is not None else orjson.loads(
            line.data[3:] if has_byte_order_mark(line) else line.data)
    except Exception:  # json's full path read this line (orjson refused it): read it so
        try:
            value, _ = _DECODER.decode(line.data.decode("utf-8").removeprefix("\ufeff"))
        except Exception:
            return None
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def parse_document(line: Line, max_line_bytes: int, schema: Schema = PILE) -> Document:
    """Validate one line; returns its Document or raises BadRecord (whatever the line holds)."""
    try:
        return _parse(line, max_line_bytes, schema)
    except BadRecord:
        raise
    except RecursionError:
        raise BadRecord("too_deep", "nested deeper than the JSON parser can follow") from None
    except MemoryError:
        raise  # the worker's state, not the line's: let the runner retry the work elsewhere
    except Exception as e:  # anything unforeseen in one line is that line's problem, never the job's
        raise BadRecord("invalid_record", f"{type(e).__name__}: {e}") from None


def _parse(line: Line, max_line_bytes: int, schema: Schema) -> Document:
    if line.oversized:
        raise BadRecord("line_too_long", f"{line.oversized} bytes > max_line_bytes={max_line_bytes}")
    if line.row is not None:
        return _parse_row(line.row, schema)
    data = line.data[:-1] if line.data.endswith(b"\r") else line.data
    if has_byte_order_mark(line):
        data = data[len(BYTE_ORDER_MARK):]
    document = _parse_plain(data, schema)
    if document is not None:
        return document
    try:
        text_of_line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRecord("invalid_utf8", str(e)) from None
    if not text_of_line.strip():
        raise BadRecord("blank_line", "line is empty or whitespace")
    try:
        obj, repeated = _DECODER.decode(text_of_line)
    except ValueError as e:  # JSONDecodeError, and integers longer than Python converts
        raise BadRecord("invalid_json", str(e)) from None
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object", f"JSON {_kind(obj)}, expected an object")
    text = _text(obj, schema, data)
    subset = _subset(obj, schema)
    return Document(text, subset, repeated, _id(obj, schema) if schema.id_path else None)


def _parse_row(row: dict, schema: Schema) -> Document:
    """The document of a columnar row that holds a value JSON cannot (it is not a valid one, or is)."""
    text = _text(row, schema, None)
    if _SURROGATE.search(text):
        raise BadRecord("invalid_unicode", f"`{schema.text_key}` holds a lone surrogate")
    return Document(text, _subset(row, schema), False, _id(row, schema) if schema.id_path else None)


def _key_ends(data: bytes, limit: int) -> int:
    r"""Unescaped quotes followed by a colon (JSON whitespace between), counted up to `limit`.

    Every key ends so; so can a string that starts with a colon, never anything else. A quote is
    escaped when an odd number of backslashes precedes it (the regex alone would count `\":`).
    """
    ends = 0
    for match in _KEY_END.finditer(data):
        i = j = match.start()
        while j and data[j - 1] == _BACKSLASH:
            j -= 1
        if (i - j) % 2 == 0:
            ends += 1
            if ends >= limit:
                break
    return ends


def _parse_plain(data: bytes, schema: Schema) -> Document | None:
    """The document of a line that is plainly valid, read by orjson (~2x json's speed); else None.

    None sends the line through json's full path, which names every problem exactly: orjson refuses
    invalid UTF-8, lone surrogates, NaN and numbers out of range, and a line it accepts is used only
    when its text and subset name validate and no key can have been repeated. orjson keeps one value
    per key without saying whether a key came twice; a line has no repeated key when it has no more
    key ends (`_key_ends`) than the keys orjson kept.
    """
    try:
        obj = orjson.loads(data)
    except Exception:  # whatever orjson refuses, json's full path decides
        return None
    if not isinstance(obj, dict):
        return None
    keys, values = 0, [obj]
    while values:
        value = values.pop()
        if isinstance(value, dict):
            keys += len(value)
            values.extend(value.values())
        elif isinstance(value, list):
            values.extend(value)
    if _key_ends(data, keys + 1) != keys:
        return None
    try:
        return Document(_text(obj, schema, None), _subset(obj, schema), False,
                        _id(obj, schema) if schema.id_path else None)
    except BadRecord:
        return None


def file_stats() -> dict:
    """What validation adds to an input file's stats in the manifest, all zero.

    byte_order_mark: 1 when the file starts with one (dropped); duplicate_keys: lines with a
    repeated key on the path to the text or subset (`ambiguous`, dead letters) or elsewhere only
    (`elsewhere`, kept: the last value wins).
    """
    return {"byte_order_mark": 0, "duplicate_keys": {"ambiguous": 0, "elsewhere": 0}}


def validate(line: Line, max_line_bytes: int, schema: Schema, stats: dict) -> Document:
    """`parse_document`, counting into a `file_stats()` dict."""
    if has_byte_order_mark(line):
        stats["byte_order_mark"] += 1
    try:
        doc = parse_document(line, max_line_bytes, schema)
    except BadRecord as bad:
        if bad.reason == "duplicate_key":
            stats["duplicate_keys"]["ambiguous"] += 1
        raise
    if doc.duplicate_keys_elsewhere:
        stats["duplicate_keys"]["elsewhere"] += 1
    return doc


def parse_line(line: Line, max_line_bytes: int, schema: Schema = PILE) -> tuple[str, str]:
    """Validate one line; returns (text, subset) or raises BadRecord."""
    doc = parse_document(line, max_line_bytes, schema)
    return doc.text, doc.subset


def line_prefix(line: Line) -> str:
    """A short, printable start of a line for a dead-letter record."""
    return line.data[: PREFIX_CHARS * 4].decode("utf-8", errors="backslashreplace")[:PREFIX_CHARS]

