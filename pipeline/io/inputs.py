"""Stream Pile-format JSON-lines files (zstd, gzip or plain; local, EFS or s3://) with bounded memory.

A file becomes a sequence of `Chunk`s: consecutive raw lines, split on newline bytes (never
`str.splitlines()`, which also splits on U+2028/U+0085 inside JSON strings), cut every
`chunk_bytes` of decompressed data. Chunks are the unit that is fanned out to workers, so the
30 unsplittable Pile files do not cap parallelism; their boundaries depend only on the bytes, so
every run cuts the same chunks.

Parsing and validation (`pipeline.core.documents`) is separate and runs after the fan-out.
"""

from __future__ import annotations

import dataclasses
import gzip
import zlib
from collections.abc import Iterator

import fsspec
import zstandard

from pipeline.core.documents import PREFIX_CHARS, Line
from pipeline.io.urls import redact_url

READ_BLOCK = 1 << 20  # compressed bytes read per call
MAX_CHUNK_LINES = 1 << 16  # a chunk of tiny (or blank) lines stays small too


class CorruptInputError(IOError):
    """An input file cannot be decompressed to the end (truncated, not zstd/gzip, bad frame)."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Consecutive lines of one input file: the unit of work after the fan-out."""

    file_index: int
    chunk_index: int
    path: str
    lines: tuple[Line, ...]
    input_bytes: int = 0  # bytes of the file as stored (compressed) read for this chunk, for progress

    @property
    def num_bytes(self) -> int:
        """Decompressed bytes carried (for progress and sizing)."""
        return sum(len(line.data) for line in self.lines)


def expand_inputs(patterns: list[str]) -> list[str]:
    """Expand globs (local or fsspec URLs) into a sorted, de-duplicated list of files.

    Raises FileNotFoundError naming any pattern that matches nothing: an empty input must never
    silently become an empty output.
    """
    files: set[str] = set()
    for pattern in patterns:
        fs, _, paths = fsspec.core.get_fs_token_paths(pattern, mode="rb")
        matched = [p for p in paths if fs.isfile(p)]
        if not matched:
            raise FileNotFoundError(f"No input files match {redact_url(pattern)!r}")
        protocol = pattern.split("://", 1)[0] + "://" if "://" in pattern else ""
        files.update(protocol + p if protocol and not p.startswith(protocol) else p for p in matched)
    return sorted(files)


def _zstd_blocks(raw, path: str) -> Iterator[bytes]:
    # decompressobj() handles one frame and, like stream_reader, returns partial data from a
    # truncated frame without complaint; so loop over concatenated frames and check `eof` at the end.
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    dobj = dctx.decompressobj()
    frame_open = False
    seen_input = False
    while True:
        block = raw.read(READ_BLOCK)
        if not block:
            break
        seen_input = True
        while block:
            try:
                out = dobj.decompress(block)
            except zstandard.ZstdError as e:
                raise CorruptInputError(f"{redact_url(path)}: not valid zstd data ({e})") from e
            frame_open = True
            if out:
                yield out
            if dobj.eof:
                block = dobj.unused_data
                dobj = dctx.decompressobj()
                frame_open = False
            else:
                block = b""
    if not seen_input:
        raise CorruptInputError(f"{redact_url(path)}: empty file (0 bytes) is not a zstd stream")
    if frame_open:
        raise CorruptInputError(f"{redact_url(path)}: zstd stream truncated (last frame incomplete)")


def _gzip_blocks(raw, path: str) -> Iterator[bytes]:
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            while block := f.read(READ_BLOCK):
                yield block
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        raise CorruptInputError(f"{redact_url(path)}: gzip stream truncated or corrupt ({e})") from e


def _plain_blocks(raw, path: str) -> Iterator[bytes]:
    while block := raw.read(READ_BLOCK):
        yield block


def _decompressed_blocks(raw, path: str) -> Iterator[bytes]:
    name = path.lower()
    if name.endswith(".zst") or name.endswith(".zstd"):
        return _zstd_blocks(raw, path)
    if name.endswith(".gz"):
        return _gzip_blocks(raw, path)
    return _plain_blocks(raw, path)


def iter_lines(path: str, max_line_bytes: int) -> Iterator[Line]:
    """Yield every line of a file with bounded memory.

    A line longer than `max_line_bytes` is not held: only its first bytes are kept and its full
    length is counted, so a runaway multi-GB line cannot exhaust memory.
    """
    number = 0
    offset = 0  # decompressed offset of the current line's first byte
    pending = bytearray()
    skipping = 0  # >0 while inside an oversized line: bytes seen so far
    consumed = 0  # bytes of the stored file read so far
    with fsspec.open(path, "rb") as raw:
        for block in _decompressed_blocks(raw, path):
            # A line's end in the stored file, for progress: interpolated within the block.
            before, consumed = consumed, raw.tell()
            start = 0
            while True:
                end = block.find(b"\n", start)
                piece = block[start:] if end < 0 else block[start:end]
                if skipping:
                    skipping += len(piece)
                elif len(pending) + len(piece) > max_line_bytes:
                    skipping = len(pending) + len(piece)
                    pending = (pending + piece[: PREFIX_CHARS * 4])[: PREFIX_CHARS * 4]
                else:
                    pending += piece
                if end < 0:
                    break
                number += 1
                yield Line(number, offset, bytes(pending), skipping,
                           before + (consumed - before) * (end + 1) // len(block))
                offset += (skipping or len(pending)) + 1
                pending = bytearray()
                skipping = 0
                start = end + 1
        consumed = raw.tell()
    if pending or skipping:
        number += 1
        yield Line(number, offset, bytes(pending), skipping, consumed)


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
