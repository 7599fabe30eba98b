"""Input lines read back by file and line, in one streaming pass, checked to be the input the run read.

The manifest records each input's `lines` and `decompressed_bytes` as the job counted them (every
line, and the sum of the lines' bytes: pipeline/beam/read.py). A read back goes through the whole
file with the job's own line reader (JSON lines: zstd, gzip, plain; Parquet, Arrow; local or a URL)
and compares both counts: an input truncated, appended to, replaced or edited by a different number
of bytes since the run is refused, naming the file, instead of showing other text as the removed
one. An edit that keeps both counts (a word replaced by one of the same length) changes the input's
`content_digest`, which the job computed from every line as it read them and the read back
computes again (pipeline/core/content.py): refused too. (A manifest written before the digest has
none; there, such an edit is caught for the documents a stage decided: re-deciding them,
pipeline/inspect/replay.py, no longer gives their records.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pipeline.core.content import MOD, digest_hex, line_term
from pipeline.core.documents import Line, Schema
from pipeline.io import columnar
from pipeline.io.decompress import CorruptInputError
from pipeline.io.inputs import iter_lines
from pipeline.io.urls import redact_url


class InputChanged(LookupError):
    """An input is no longer the file the run read: what it holds now is not what was removed."""


def schema_of(config: dict) -> Schema:
    """Where the run's inputs keep their text, subset name and id, as its manifest records."""
    default = Schema()
    return Schema(config.get("text_key", default.text_key), config.get("subset_key", default.subset_key),
                  config.get("default_subset"), config.get("subset_names", "pile") == "any", config.get("id_key"))


def max_line_bytes(config: dict) -> int:
    """The run's --max_line_mb, in bytes (a longer line was a dead letter, and is read as one here)."""
    return int(float(config.get("max_line_mb", 64.0)) * (1 << 20))


def read_input(entry: dict, config: dict, wanted: Iterable[int] = (),
               visit: Callable[[Line], None] | None = None) -> dict[int, Line]:
    """The lines numbered `wanted` of one input (its manifest entry), after reading all of it.

    `visit(line)` is called on every line, in order (the report's one pass). Raises InputChanged
    naming the file when its line count or decompressed size is not the manifest's, or when it is gone.
    """
    path = entry["path"]
    shown = redact_url(path)
    wanted = set(wanted)
    found: dict[int, Line] = {}
    lines = size = content = 0
    if columnar.is_columnar(path):
        stream = columnar.iter_lines(path, schema_of(config))
    else:
        stream = iter_lines(path, max_line_bytes(config))
    try:
        for line in stream:
            lines += 1
            size += len(line.data)
            content += line_term(line.number, line.data, line.oversized)
            if line.number in wanted:
                found[line.number] = line
            if visit is not None:
                visit(line)
    except FileNotFoundError:
        raise InputChanged(f"{shown}: the run's input is not there any more") from None
    except CorruptInputError as e:
        if "damaged" not in entry:  # the run read it whole: it was damaged since
            raise InputChanged(f"{shown} changed since the run: it cannot be read to its end now ({e})") from None
    expected = (entry.get("lines"), entry.get("decompressed_bytes"))
    if not all(isinstance(n, int) for n in expected):
        raise InputChanged(f"{shown}: the manifest records no line count and size of it, so whether it changed "
                           "since the run cannot be told")
    if (lines, size) != expected:
        raise InputChanged(
            f"{shown} changed since the run: it holds {lines:,} lines, {size:,} bytes decompressed; the run read "
            f"{expected[0]:,} lines, {expected[1]:,} bytes. What it holds now is not what the run removed")
    digest = entry.get("content_digest")
    if isinstance(digest, str) and digest_hex(content % MOD) != digest:
        raise InputChanged(
            f"{shown} changed since the run: it holds as many lines and bytes as the run read, but other content "
            "(its content digest differs). What it holds now is not what the run removed")
    return found
