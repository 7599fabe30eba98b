"""Input files re-framed for parallel reads: the same bytes in independent zstd frames, with an index.

A Pile file is one zstd frame: only one reader can go through it, from its start (minutes for a
14 GB file from object storage), and a reader lost midway starts again. `reframe` rewrites a
`.jsonl.zst` file once as consecutive independent frames of about `frame_bytes` (~1 GB) each,
every one starting at a chunk boundary (where `iter_chunks` cuts for a given --chunk_mb and
--max_line_mb), followed by a zstd *skippable frame* holding an index: for each frame its compressed
offset and size, and where it starts in the file's content (byte offset, lines and chunks before it).

Every zstd reader (the zstd command, python-zstandard, this pipeline's serial reader) reads the new
file as it read the old one: concatenated frames decompress to the concatenated content and
skippable frames are skipped. The content is byte for byte the original's, so its lines, chunks,
dead letters, records and shards are too (tests/test_frames.py runs a job on both and compares every
output file).

A job reads an indexed file one frame per work item (`read_units`, `iter_unit_chunks`): ~27 items
for a 27 GB Pile file instead of one, fanned out to any worker, and a retried item re-reads one
frame. Each item is checked against the index (content bytes, lines, chunks); an index made for
another --chunk_mb or --max_line_mb, or one that does not fit the file, is not used: the file is
read from its start, as any other.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import struct
import tempfile
from collections.abc import Iterator

import fsspec
import zstandard

from pipeline.io.inputs import Chunk, CorruptInputError, iter_chunks
from pipeline.io.publish import publish
from pipeline.io.urls import name_part, redact_url

LOG = logging.getLogger(__name__)

FORMAT = "pile-pipeline-frames"
VERSION = 1
_SKIPPABLE_MAGIC = 0x184D2A5E  # zstd skippable frames: 0x184D2A50..5F, content ignored by decoders
_TAG = b"PILEFRM1"
_TRAILER = struct.Struct("<I8s")  # index length, tag: the file's last 12 bytes
_BLOCK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame of an indexed file: compressed [offset, offset + size), content [start, start + length)."""

    offset: int
    size: int
    start: int
    length: int
    first_line: int  # lines before the frame
    lines: int
    first_chunk: int
    chunks: int


@dataclasses.dataclass(frozen=True)
class Stripe:
    """Every `count`-th chunk of a whole (unindexed) file, from chunk `index`: one worker's share of it.

    Each worker sharing a file decompresses all of it (cheap beside tokenizing the same bytes)
    and keeps its own chunks, numbered as in the whole file, so the output is the same bytes as one
    reader's; on one machine this spreads a file over the workers without sending its text through
    the driver (pipeline/beam/runners/work_items.py). With a `board` (the run's, when DirectRunner's workers
    are threads of one process) each of the `count` readers takes the chunks it is first to claim
    instead (pipeline/beam/runners/direct/claims.py, which reads such a stripe): the same chunks in all.
    """

    index: int
    count: int
    board: str | None = None


def read_index(path: str) -> tuple[dict, list[Frame]] | None:
    """(index settings, frames) of an indexed file, or None for a file without an index."""
    if not name_part(path).lower().endswith((".zst", ".zstd")):
        return None
    fs, root = fsspec.core.url_to_fs(path)
    size = fs.size(root)
    if size < _TRAILER.size + 8:
        return None
    with fs.open(root, "rb") as f:
        f.seek(size - _TRAILER.size)
        length, tag = _TRAILER.unpack(f.read(_TRAILER.size))
        if tag != _TAG or length + _TRAILER.size + 8 > size:
            return None
        f.seek(size - _TRAILER.size - length - 8)
        magic, payload = struct.unpack("<II", f.read(8))
        index = json.loads(f.read(length))
    if magic != _SKIPPABLE_MAGIC or payload != length + _TRAILER.size or index.get("format") != FORMAT:
        return None
    frames = [Frame(**f) for f in index.pop("frames")]
    end = 0
    for frame in frames:  # the frames must tile the file up to the index, and the content likewise
        if frame.offset != end:
            raise CorruptInputError(f"{redact_url(path)}: frame index does not fit the file (at byte {end})")
        end = frame.offset + frame.size
    if end != size - length - _TRAILER.size - 8:
        raise CorruptInputError(f"{redact_url(path)}: frame index does not fit the file (ends at {end})")
    return index, frames


def read_units(path: str, chunk_bytes: int, max_line_bytes: int) -> list[Frame | None]:
    """The work items of one input file: its frames when it is indexed for these settings, else [None]."""
    found = read_index(path)
    if found is None:
        return [None]
    index, frames = found
    if (index["version"], index["chunk_bytes"], index["max_line_bytes"]) != (VERSION, chunk_bytes, max_line_bytes):
        LOG.warning("%s: its frame index was made for other --chunk_mb/--max_line_mb; read from its start",
                    redact_url(path))
        return [None]
    return frames


def iter_unit_chunks(path: str, file_index: int, unit: Frame | Stripe | None, chunk_bytes: int,
                     max_line_bytes: int) -> Iterator[Chunk]:
    """The chunks of a work item: the whole file (unit None), one frame or one stripe, numbered as in the whole file."""
    if unit is None:
        yield from iter_chunks(path, file_index, chunk_bytes, max_line_bytes)
        return
    if isinstance(unit, Stripe):
        for chunk in iter_chunks(path, file_index, chunk_bytes, max_line_bytes):
            if chunk.chunk_index % unit.count == unit.index:
                yield chunk
        return
    shown = redact_url(path)
    with tempfile.TemporaryDirectory(prefix="pile-pipeline-frame-") as tmp:
        # The frame alone is a complete .zst file: the serial reader reads it, then lines and chunks
        # are renumbered to their place in the whole file.
        local = os.path.join(tmp, "frame.jsonl.zst")
        with fsspec.open(path, "rb") as src, open(local, "wb") as dst:
            src.seek(unit.offset)
            left = unit.size
            while left:
                block = src.read(min(_BLOCK, left))
                if not block:
                    raise CorruptInputError(f"{shown}: ends inside frame at byte {unit.offset}")
                dst.write(block)
                left -= len(block)
        lines = chunks = length = 0
        for chunk in iter_chunks(local, file_index, chunk_bytes, max_line_bytes):
            moved = tuple(dataclasses.replace(line, number=line.number + unit.first_line,
                                              offset=line.offset + unit.start) for line in chunk.lines)
            lines += len(moved)
            last = chunk.lines[-1]
            length = last.offset + (last.oversized or len(last.data)) + 1
            chunks += 1
            yield dataclasses.replace(chunk, chunk_index=chunk.chunk_index + unit.first_chunk, path=path,
                                      lines=moved)
    if (lines, chunks, length) != (unit.lines, unit.chunks, unit.length):
        raise CorruptInputError(f"{shown}: frame at byte {unit.offset} does not match its index "
                                f"({lines} lines, {chunks} chunks; index: {unit.lines}, {unit.chunks})")


def _frame_plan(path: str, chunk_bytes: int, max_line_bytes: int, frame_bytes: int) -> tuple[list[Frame], int]:
    """Frames (without compressed offsets) cut at chunk ends every >= frame_bytes, and the content size."""
    frames: list[Frame] = []
    start = first_line = first_chunk = lines = chunks = end = 0
    for chunk in iter_chunks(path, 0, chunk_bytes, max_line_bytes):
        last = chunk.lines[-1]
        end = last.offset + (last.oversized or len(last.data)) + 1
        lines += len(chunk.lines)
        chunks += 1
        if end - start >= frame_bytes:
            frames.append(Frame(0, 0, start, end - start, first_line, lines, first_chunk, chunks))
            start, first_line, first_chunk, lines, chunks = end, first_line + lines, first_chunk + chunks, 0, 0
    if chunks:
        frames.append(Frame(0, 0, start, end - start, first_line, lines, first_chunk, chunks))
    return frames, end


def reframe(src: str, dest: str, chunk_bytes: int, max_line_bytes: int, frame_bytes: int = 1 << 30,
            level: int = 3) -> list[Frame]:
    """Write `src` (a .jsonl.zst file) to `dest` as indexed frames; `dest` may be `src` (atomic replace).

    Reads `src` twice (chunk boundaries, then the bytes), then reads the result once more through
    `iter_unit_chunks` to check every frame against the index. Returns the frames.
    """
    if not src.lower().endswith((".zst", ".zstd")) or not dest.lower().endswith((".zst", ".zstd")):
        raise ValueError("reframe reads and writes .zst files (the content keeps its name and compression)")
    plan, total = _frame_plan(src, chunk_bytes, max_line_bytes, frame_bytes)
    if not plan:
        raise ValueError(f"{redact_url(src)} has no lines: nothing to reframe")
    frames: list[Frame] = []
    cctx = zstandard.ZstdCompressor(level=level)

    def parts() -> Iterator[bytes]:
        offset = 0
        with fsspec.open(src, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(
                raw, read_across_frames=True) as content:
            for frame in plan:
                # The last frame also takes a final line without a newline (the plan counts one).
                length = min(frame.length, total - frame.start) if frame is not plan[-1] else None
                cobj = cctx.compressobj(size=-1 if length is None else length)
                size = 0
                left = length
                while left is None or left > 0:
                    block = content.read(_BLOCK if left is None else min(_BLOCK, left))
                    if not block:
                        break
                    if left is not None:
                        left -= len(block)
                    out = cobj.compress(block)
                    size += len(out)
                    yield out
                if left:
                    raise CorruptInputError(f"{redact_url(src)} changed while being reframed")
                out = cobj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
                size += len(out)
                yield out
                frames.append(dataclasses.replace(frame, offset=offset, size=size))
                offset += size
        index = json.dumps({"format": FORMAT, "version": VERSION, "chunk_bytes": chunk_bytes,
                            "max_line_bytes": max_line_bytes, "frames": [dataclasses.asdict(f) for f in frames]},
                           sort_keys=True).encode()
        yield struct.pack("<II", _SKIPPABLE_MAGIC, len(index) + _TRAILER.size) + index
        yield _TRAILER.pack(len(index), _TAG)

    publish(dest, parts())
    for i, unit in enumerate(read_units(dest, chunk_bytes, max_line_bytes)):
        if unit is None:
            raise CorruptInputError(f"{redact_url(dest)}: written without a usable index")
        for _ in iter_unit_chunks(dest, 0, unit, chunk_bytes, max_line_bytes):
            pass
        LOG.debug("frame %d checked", i)
    return frames
