"""Before the job starts: do the inputs' first lines hold a text and a subset where the flags say?

A wrong `--text_key` (or a corpus in another layout without `--subset_names any`) would otherwise
run the whole job and end with every line a dead letter. `check_layout` reads the first
`SAMPLE_LINES` lines (or rows of a Parquet or Arrow file) of every input and refuses, naming the
flag and the keys those lines do have (or what the key holds: an object, a number, null), when
none of a file's sampled JSON objects is a document and every one fails for the layout (where the
text or subset is, what it holds, or the subset names accepted), and when no input holds a single
line. A file with a few broken lines among good ones passes: those are the job's dead letters.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json

from pipeline.core.documents import BadRecord, Schema, parse_document
from pipeline.io import columnar
from pipeline.io.inputs import iter_lines
from pipeline.io.urls import redact_url

SAMPLE_LINES = 64
_TEXT = {"text_missing"}
_TEXT_KIND = {"text_not_string"}  # in one line that line's problem; in every sampled line the layout's
_SUBSET = {"meta_missing", "meta_not_object", "subset_missing", "subset_not_string"}
_NAMES = {"subset_unknown"}
MAX_KEYS_SHOWN = 12
_KINDS = {"dict": "an object", "list": "a list", "int": "a number", "float": "a number", "bool": "true or false",
          "NoneType": "null", "str": "a string"}


class LayoutError(ValueError):
    """The inputs' lines do not hold a text or subset where the flags say: the flags to change."""


def _keys(objects: list[dict], path: tuple[str, ...]) -> list[str]:
    """The keys the objects have at the deepest level of `path` they reach (dotted)."""
    found: set[str] = set()
    for obj in objects:
        value, prefix = obj, ""
        for key in path:
            if not isinstance(value, dict) or key not in value or not isinstance(value[key], dict):
                break
            value, prefix = value[key], f"{prefix}{key}."
        if isinstance(value, dict):
            found.update(prefix + k for k in value)
    return sorted(found)


def _held(objects: list[dict], path: tuple[str, ...]) -> str:
    """What the objects hold at `path`, for a message: "an object", "a number or null", ..."""
    kinds = []
    for obj in objects:
        value = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        kind = _KINDS.get(type(value).__name__, type(value).__name__)
        if kind not in kinds:
            kinds.append(kind)
    return " or ".join(kinds)


def _lines(path: str, schema: Schema, max_line_bytes: int):
    if columnar.is_columnar(path):
        return columnar.iter_lines(path, schema)
    return iter_lines(path, max_line_bytes)


def _sample(path: str, schema: Schema, max_line_bytes: int) -> tuple[str | None, int]:
    """(why the first lines of `path` cannot be this layout's documents, or None when they can; lines read)."""
    reasons, objects = [], []
    read = filled = 0
    for line in itertools.islice(_lines(path, schema, max_line_bytes), SAMPLE_LINES):
        read += 1
        try:
            parse_document(line, max_line_bytes, schema)
            return None, read
        except BadRecord as bad:
            filled += bad.reason != "blank_line"
            if bad.reason in _TEXT | _TEXT_KIND | _SUBSET | _NAMES:
                try:  # a columnar row holding what JSON cannot (bytes) is read as it is
                    objects.append(line.row if line.row is not None else json.loads(line.data))
                except ValueError:
                    continue
                reasons.append(bad.reason)
    if not objects:
        return None, read  # nothing to go by (blank or broken lines only): the job's dead letters say it
    if set(reasons) <= _TEXT_KIND and len(objects) < filled:
        return None, read  # a text of another type among broken lines: a damaged file, the job's dead letters
    return _problem(path, schema, reasons, objects), read


def _problem(path: str, schema: Schema, reasons: list[str], objects: list[dict]) -> str:
    shown = redact_url(path)
    what = "row(s)" if columnar.is_columnar(path) else "line(s)"
    if any(r in _TEXT for r in reasons):
        keys = _keys(objects, schema.text_path)
        return (f"--text_key {schema.text_key!r}: no text there in the first {len(objects)} {what} of {shown}; "
                f"their keys: {', '.join(keys[:MAX_KEYS_SHOWN]) or 'none'} (a dotted path reaches a nested one: "
                "--text_key doc.body)")
    if any(r in _TEXT_KIND for r in reasons):
        keys = [k for k in _keys(objects, schema.text_path) if k.startswith(schema.text_key + ".")]
        inside = f"; a dotted path reaches a field inside it: {', '.join(keys[:MAX_KEYS_SHOWN])}" if keys else ""
        return (f"--text_key {schema.text_key!r}: in the first {len(objects)} {what} of {shown} it holds "
                f"{_held(objects, schema.text_path)}, not a text (a string){inside}")
    if all(r == "subset_not_string" for r in reasons):
        return (f"--subset_key {schema.subset_key!r}: in the first {len(objects)} {what} of {shown} it holds "
                f"{_held(objects, schema.subset_path)}, not a subset name (a string); --default_subset NAME names "
                "the subset of lines without one")
    return _subset_problem(objects, schema, f"the first {len(objects)} {what} of {shown}")


ONE_SUBSET = "--default_subset other"  # the one flag that runs lines without a subset name: all in subset "other"


def _subset_problem(objects: list[dict], schema: Schema, where: str) -> str:
    """Why no sampled line has a subset name where --subset_key says, and the flag that fixes it."""
    states = [_subset_at(o, schema.subset_path) for o in objects]
    names = sorted({value for state, value in states if state == "name"})
    flag = f"--subset_key {schema.subset_key!r}"
    if any(state == "wrong type" for state, _ in states) and not names:
        keys = _keys(objects, schema.subset_path)
        return (f"{flag}: no subset name there in {where}; their keys: {', '.join(keys[:MAX_KEYS_SHOWN]) or 'none'}. "
                "Pass the key of the name (--subset_key source.name), or --default_subset NAME for lines without one")
    if names:  # names there, none accepted: another corpus's names
        shown = f"{', '.join(map(repr, names[:MAX_KEYS_SHOWN]))} at {flag}"
        if any(state in ("absent", "null") for state, _ in states):
            return (f"--subset_names pile: {where} name no subset of the Pile ({shown}) and some name none: pass "
                    f"{ONE_SUBSET} (any NAME) for the lines without one, which accepts any name too")
        return (f"--subset_names pile: {where} name no subset of the Pile ({shown}); pass --subset_names any for "
                "another corpus")
    if all(state == "absent" for state, _ in states):
        keys = ", ".join(_keys(objects, schema.subset_path)[:MAX_KEYS_SHOWN]) or "none"
        return (f"{flag}: {where} have no subset name there (their keys: {keys}); "
                f"pass {ONE_SUBSET} to put them all in one subset (any NAME), or --subset_key KEY where each "
                "line names its subset")
    return (f"{flag} holds null or an empty name in {where}: pass {ONE_SUBSET} to put such lines in one "
            "subset (any NAME)")


def _subset_at(obj: dict, path: tuple[str, ...]) -> tuple[str, str | None]:
    """('absent' | 'null' | 'wrong type' | 'name', the name) of the value at `path` in `obj`."""
    value = obj
    for depth, key in enumerate(path):
        if not isinstance(value, dict):
            return "wrong type", None
        if key not in value:
            return "absent", None
        value = value[key]
        if value is None or (depth == len(path) - 1 and value == ""):
            return "null", None
    return ("name", value) if isinstance(value, str) else ("wrong type", None)


def check_layout(schema: Schema, input_files: list[str], max_line_bytes: int) -> None:
    """Raise LayoutError naming the flags to change when an input's first lines are of another layout.

    Reads at most SAMPLE_LINES lines of each file (a few files at once); a damaged file is left for
    the job to report, with its policy (--on_corrupt_file).
    """
    def one(path: str) -> tuple[str | None, int | None]:
        try:
            return _sample(path, schema, max_line_bytes)
        except (OSError, ValueError, columnar.ArrowError):
            return None, None  # damaged or unreadable: the job reports it, by its policy

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        found = list(pool.map(one, input_files))
    problems = [p for p, _ in found if p]
    if problems:
        more = f" (and {len(problems) - 1} more file(s) alike)" if len(problems) > 1 else ""
        raise LayoutError(problems[0] + more)
    if input_files and all(read == 0 for _, read in found):  # the job would write nothing
        shown = ", ".join(redact_url(p) for p in input_files[:3]) + (", ..." if len(input_files) > 3 else "")
        raise LayoutError(f"--input: every input is empty (no line, or no row of a Parquet or Arrow file): {shown}")
