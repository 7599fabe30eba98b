"""Stream Pile-format JSON-lines files (zstd, gzip or plain; local, EFS or s3://) with bounded memory.

A file becomes a sequence of `Chunk`s: consecutive raw lines, split on newline bytes (never
`str.splitlines()`, which also splits on U+2028/U+0085 inside JSON strings), cut every
`chunk_bytes` of decompressed data. Chunks are the unit that is fanned out to workers, so the
30 unsplittable Pile files do not cap parallelism; their boundaries depend only on the bytes, so
every run cuts the same chunks.

Memory stays bounded whatever the input: decompression returns at most 1 MiB at a time and refuses
a zstd frame whose window exceeds `max_window_bytes` (pipeline/io/decompress.py); a line longer
than `max_line_bytes` is counted, not held (only its first bytes are kept for the dead letter).

Every input is checked before the job starts (`expand_inputs`): a pattern that matches nothing, a
folder, a dangling symlink, a symlink loop, something that is not a regular file or cannot be read
is reported, all of them in one error, instead of being skipped or found by a worker mid-job.

A file is read by its name: JSON lines (`.jsonl`, `.json`, `.ndjson`, each plain, `.gz` or `.zst`)
or columnar (Parquet, Arrow: pipeline/io/columnar.py); a `datasets.save_to_disk` folder stands for
its data files. Any other name is refused before the job, naming the file.

Parsing and validation (`pipeline.core.documents`) is separate and runs after the fan-out.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import functools
import glob
import json
import os
import posixpath
import stat
from collections.abc import Iterator

import fsspec

from pipeline.core.documents import PREFIX_CHARS, Line
from pipeline.io.decompress import MIB, CorruptInputError, WindowTooLargeError, decompressed_blocks
from pipeline.io.urls import fs_path, is_local_url, name_part, reaching, redact_url

__all__ = ["Chunk", "ChunkSizes", "CorruptInputError", "InputError", "WindowTooLargeError", "expand_inputs",
           "iter_chunks", "iter_lines", "max_window_bytes"]

MAX_CHUNK_LINES = 1 << 16  # a chunk of tiny (or blank) lines stays small too
PREFIX_BYTES = PREFIX_CHARS * 4  # what is kept of an over-long line (the dead letter's prefix)
MIN_WINDOW = 8 * MIB  # zstd's levels 1-19 never declare more
MAX_WINDOW = 2048 * MIB  # zstd's largest window (ZSTD_WINDOWLOG_MAX on 64-bit): 2**31 bytes
MAX_LINE_MB = MAX_WINDOW // MIB // 2  # the window is twice the longest line (max_window_bytes)
MAX_PROBLEMS_SHOWN = 20
JSON_LINES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = ("", ".gz", ".zst", ".zstd")
COLUMNAR = (".parquet", ".pq", ".arrow", ".feather", ".ipc")  # pipeline/io/columnar.py
SUPPORTED = tuple(kind + c for kind in JSON_LINES for c in COMPRESSIONS) + COLUMNAR


class ChunkSizes:
    """Base of the configs that read inputs in chunks (the job's, the tokenizer sample's).

    They declare `chunk_mb` and `max_line_mb` (MiB), with their limits (the options' bounds,
    pipeline/config/inputs.py); this gives the sizes in bytes.
    """

    @property
    def chunk_bytes(self) -> int:
        """Decompressed bytes per chunk."""
        return int(self.chunk_mb * MIB)

    @property
    def max_line_bytes(self) -> int:
        """Longest input line accepted, in bytes."""
        return int(self.max_line_mb * MIB)


class InputError(FileNotFoundError):
    """Inputs that are missing, not regular files or unreadable: every problem found, in one message."""


def file_type_problem(url: str) -> str | None:
    """Why a file's name is not one the job reads, or None when it is (a presigned URL: by its name, not its query)."""
    if name_part(url).lower().endswith(SUPPORTED):
        return None
    return (f"{redact_url(url)}: not a file type the job reads (JSON lines: .jsonl/.json/.ndjson, plain, .gz or "
            ".zst; .parquet; .arrow; a datasets.save_to_disk folder)")


def dataset_files(folder: str, read_text) -> list[str] | None:
    """The data files of a `datasets.save_to_disk` folder (its state.json's list), or None for another folder.

    `read_text(name)`: the text of the folder's file `name`, or None when it has none.
    """
    state = read_text("state.json")
    if state is None and read_text("dataset_dict.json") is not None:
        raise InputError(dataset_dict_problem(folder, read_text("dataset_dict.json")))
    if state is None or read_text("dataset_info.json") is None:
        return None
    try:
        files = [entry["filename"] for entry in json.loads(state).get("_data_files", [])]
    except (ValueError, TypeError, KeyError, AttributeError):
        files = []
    if not files or any(posixpath.basename(name) != name for name in files):
        raise InputError(f"{redact_url(folder)}: its state.json lists no data files")
    return [posixpath.join(folder, name) for name in files]


def dataset_dict_problem(folder: str, text: str) -> str:
    """The line for a `DatasetDict.save_to_disk` folder: one split's folder is an input, never all of them mixed."""
    try:
        splits = [str(split) for split in json.loads(text)["splits"]]
    except (ValueError, TypeError, KeyError):
        splits = []
    shown = redact_url(folder).rstrip("/")
    example = posixpath.join(shown, splits[0] if splits else "train")
    return (f"{shown}: a datasets DatasetDict folder (splits: {', '.join(splits) or 'none listed'}); give one "
            f"split's folder, e.g. --input {example}")


def _read_local(folder: str):
    def read_text(name: str) -> str | None:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None
    return read_text


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Consecutive lines of one input file: the unit of work after the fan-out."""

    file_index: int
    chunk_index: int
    path: str
    lines: tuple[Line, ...]
    input_bytes: int = 0  # bytes of the file as stored (compressed) read for this chunk, for progress
    # Tokenize it, and the chunks waiting for their batch, before reading on: a chunk claimed from a
    # file the workers share (pipeline/beam/runners/direct/claims.py), or the last of a group taken from the queue.
    tokenize_now: bool = False

    @functools.cached_property
    def num_bytes(self) -> int:
        """Decompressed bytes carried (for progress and sizing)."""
        return sum(len(line.data) for line in self.lines)


def _local_problem(path: str) -> str | None:
    """Why a local path matched by an input pattern cannot be read, or None when it can."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"{path}: dangling symlink (to {os.readlink(path)})"
        return f"{path}: does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{path}: symlink loop"
        return f"{path}: cannot be looked up ({e.strerror})"
    if stat.S_ISDIR(info.st_mode):
        return f"{path}: is a folder, not a file (match files only, e.g. DIR/*.jsonl.zst)"
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file"
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror})"
    return None


def _local_matches(pattern: str) -> tuple[list[str], list[str]]:
    protocol, path = pattern.split("://", 1) if "://" in pattern else ("", pattern)
    path = os.path.expanduser(path)
    # glob (unlike a filesystem listing) returns dangling symlinks and symlink loops too, to be reported.
    matches = sorted(glob.glob(path, recursive=True)) if glob.has_magic(path) else [path]
    matches = [os.path.abspath(m) for m in matches if os.path.lexists(m)]
    if not matches:
        return [], [f"{pattern!r} matches nothing"]
    expanded = []
    for match in matches:
        data = dataset_files(match, _read_local(match)) if os.path.isdir(match) else None
        expanded += data if data is not None else [match]
    matches = expanded
    problems = [p for p in map(_local_problem, matches) if p]
    return [f"{protocol}://{m}" if protocol else m for m in matches], problems


def _remote_problem(fs, path: str, url: str) -> str | None:
    """Why an object matched by an input pattern cannot be read (a 1-byte ranged GET), or None."""
    try:
        fs.cat_file(path, start=0, end=1)
    except FileNotFoundError:
        return f"{redact_url(url)}: does not exist"
    except PermissionError as e:
        return f"{redact_url(url)}: cannot be read ({e})"
    return None


def _read_remote(fs, path: str) -> str | None:
    try:
        return fs.cat_file(path).decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _remote_matches(pattern: str) -> tuple[list[str], list[str]]:
    with reaching("--input", pattern):
        fs, path = fsspec.core.url_to_fs(pattern)
        protocol = pattern.split("://", 1)[0] + "://"
        if glob.has_magic(path):
            found = fs.glob(path, detail=True)
        else:
            try:
                found = {path: fs.info(path)}
            except FileNotFoundError:
                found = {}
        files, problems = [], []
        for name, info in sorted(found.items()):
            url = name if name.startswith(protocol) else protocol + name
            data = None
            if info.get("type") == "directory":
                data = dataset_files(url, lambda n, folder=name: _read_remote(fs, posixpath.join(folder, n)))
            if data is not None:
                files += data
            elif info.get("type") == "directory":
                problems.append(f"{redact_url(url)}: is a folder, not a file (match files only, e.g. "
                                "DIR/*.jsonl.zst)")
            else:
                files.append(url)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            problems += [p for p in pool.map(lambda u: _remote_problem(fs, fs_path(u), u), files) if p]
    if not found:
        problems.append(f"{redact_url(pattern)!r} matches nothing")
    return files, problems


def expand_inputs(patterns: list[str], check_types: bool = True) -> list[str]:
    """Expand globs (local or fsspec URLs) into a sorted, de-duplicated list of readable files.

    `check_types`: refuse names of a type the job does not read (`file_type_problem`); the eval
    sets of --decontaminate may be plain text too.

    Raises:
        InputError: naming every problem at once (see the module docstring); an empty input must
            never silently become an empty output.
    """
    files: set[str] = set()
    problems: list[str] = []
    for pattern in patterns:
        found, wrong = (_local_matches if is_local_url(pattern) else _remote_matches)(pattern)
        files.update(found)
        problems.extend(wrong)
    if check_types:
        problems += [p for p in map(file_type_problem, sorted(files)) if p]
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = f"; and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        if len(problems) == 1 and problems[0].endswith("matches nothing"):
            raise InputError(f"No input files match {problems[0].rsplit(' matches', 1)[0]}")
        raise InputError(f"{len(problems)} input problem(s): " + "; ".join(shown) + more)
    return sorted(files)


def max_window_bytes(max_line_bytes: int) -> int:
    """The largest zstd window a frame may declare: twice the longest line, and at least 8 MiB.

    At the default --max_line_mb (64) that is 128 MiB: what `zstd --long` writes and what the zstd
    command accepts without --memory.
    """
    return max(MIN_WINDOW, 2 * max_line_bytes)


def _prefix(parts: list[bytes]) -> bytes:
    """The first PREFIX_BYTES of the pieces of a line, without joining the rest."""
    prefix = b""
    for part in parts:
        prefix += part[:PREFIX_BYTES - len(prefix)]
        if len(prefix) == PREFIX_BYTES:
            break
    return prefix


def iter_lines(path: str, max_line_bytes: int) -> Iterator[Line]:
    """Yield every line of a file with bounded memory.

    A line longer than `max_line_bytes` is not held: only its first bytes are kept and its full
    length is counted, so a runaway multi-GB line cannot exhaust memory.
    """
    number = 0
    offset = 0  # decompressed offset of the current line's first byte
    parts: list[bytes] = []  # the current line's pieces so far (at most max_line_bytes)
    held = 0
    oversized = 0  # > 0 once the current line is over the limit: its length so far
    consumed = 0  # bytes of the stored file read so far
    hint = f"twice --max_line_mb, at least {MIN_WINDOW // MIB} MiB: a larger --max_line_mb allows more"
    with fsspec.open(path, "rb") as raw:
        for block in decompressed_blocks(raw, path, max_window_bytes(max_line_bytes), hint):
            # A line's end in the stored file, for progress: interpolated within the block.
            before, consumed = consumed, raw.tell()
            start, size = 0, len(block)
            while start < size:
                end = block.find(b"\n", start)
                stop = size if end < 0 else end
                if oversized:
                    oversized += stop - start
                elif held + stop - start > max_line_bytes:
                    oversized = held + stop - start
                    parts = [_prefix([*parts, block[start:start + PREFIX_BYTES]])]
                else:
                    parts.append(block[start:stop])
                    held += stop - start
                if end < 0:
                    break
                number += 1
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                yield Line(number, offset, data, oversized, before + (consumed - before) * (end + 1) // size)
                offset += (oversized or held) + 1
                parts, held, oversized = [], 0, 0
                start = end + 1
        consumed = raw.tell()
    if held or oversized:
        number += 1
        yield Line(number, offset, b"".join(parts), oversized, consumed)


def iter_chunks(path: str, file_index: int, chunk_bytes: int, max_line_bytes: int) -> Iterator[Chunk]:
    """Group a file's lines into chunks of about `chunk_bytes` decompressed bytes."""
    lines: list[Line] = []
    size = 0
    chunk_index = 0
    read = 0  # stored bytes accounted to the chunks so far
    for line in iter_lines(path, max_line_bytes):
        lines.append(line)
        size += len(line.data) + 1
        if size >= chunk_bytes or len(lines) >= MAX_CHUNK_LINES:
            yield Chunk(file_index, chunk_index, path, tuple(lines), line.input_end - read)
            read = line.input_end
            chunk_index += 1
            lines, size = [], 0
    if lines:
        yield Chunk(file_index, chunk_index, path, tuple(lines), lines[-1].input_end - read)
