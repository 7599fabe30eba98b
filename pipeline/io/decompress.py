"""Decompress an input file in bounded pieces, whatever its compression ratio or declared window.

A 70 KB file can decompress to gigabytes. Every read here returns at most `OUT_BLOCK` decompressed
bytes, so what a worker holds is set by the line and chunk limits downstream, never by the ratio.

zstd: each frame declares the window its decoder must keep (up to 2 GiB with `zstd --long=31`; a
single-segment frame's window is its whole content), and libzstd allocates it while decoding. A
frame that declares more than `max_window` bytes is refused before any of it is decoded. And
python-zstandard's streaming readers return the data of a truncated frame without complaint, so
`_FrameWalker` follows the compressed bytes through their frame and block headers (RFC 8878) on
their way into the decoder: a stream that ends inside a frame is an error, as is a damaged header.

gzip: `GzipFile.read(n)` returns at most n bytes (zlib's max_length) and its window is 32 KB.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import zstandard

from pipeline.core.errors import JobError
from pipeline.io.urls import name_part, redact_url

READ_BLOCK = 1 << 20  # compressed bytes read per call
OUT_BLOCK = 1 << 20  # decompressed bytes returned per call, at most
# The first blocks are smaller, each one after twice the one before, up to OUT_BLOCK and READ_BLOCK:
# a look at a file's first lines (the layout check, the tokenizer's self-check) reads and
# decompresses ~64 KB, not 1 MB, and the compressed bytes read keep pace with the lines made of
# them (a line's place in the stored file, for progress, is interpolated within its block).
FIRST_OUT_BLOCK = 1 << 16
FIRST_READ_BLOCK = 1 << 14
MIB = 1 << 20

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the low 4 bits are free
_FCS_BYTES = (0, 2, 4, 8)  # Frame_Content_Size field size by its flag (flag 0: 1 byte if single segment)
_DICT_ID_BYTES = (0, 1, 2, 4)


class CorruptInputError(JobError, OSError):
    """An input file cannot be decompressed to the end (truncated, not zstd/gzip, bad frame)."""


class WindowTooLargeError(CorruptInputError):
    """A zstd frame declares a larger window (decoder memory) than the job allows."""


class _FrameWalker:
    """Follows a zstd stream's frames and blocks by their headers as the compressed bytes pass by.

    Only headers are parsed (a few bytes per block of up to 128 KB); block contents are skipped.
    """

    def __init__(self, path: str, max_window: int, hint: str):
        self._path = redact_url(path)
        self._max_window = max_window
        self._hint = f" ({hint})" if hint else ""
        self._state = "magic"
        self._need = 4  # header bytes the current state needs
        self._header = b""
        self._skip = 0  # block or skippable-frame bytes to pass over
        self._after_skip = ("magic", 4)
        self._offset = 0  # compressed bytes seen
        self._at = 0  # where the header being parsed starts, for error messages
        self._frames = 0
        # The current frame's header fields.
        self._single = self._checksum = False
        self._fcs = self._dict = 0

    def _corrupt(self, problem: str) -> CorruptInputError:
        return CorruptInputError(f"{self._path}: {problem} (at compressed byte {self._at})")

    def feed(self, data: bytes) -> None:
        """Follow `data`, the next compressed bytes; raises on a header that is not zstd's."""
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                if not self._skip:
                    self._state, self._need = self._after_skip
                continue
            take = min(self._need - len(self._header), end - pos)
            self._header += data[pos:pos + take]
            pos += take
            if len(self._header) == self._need:
                self._at = self._offset + pos - self._need
                header, self._header = self._header, b""
                self._parse(header)
        self._offset += end

    def _parse(self, header: bytes) -> None:
        state = self._state
        if state == "magic":
            magic = int.from_bytes(header, "little")
            if magic == _ZSTD_MAGIC:
                self._state, self._need = "descriptor", 1
            elif magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
                self._state, self._need = "skippable", 4
            else:
                raise self._corrupt("not valid zstd data (no frame magic number)")
        elif state == "skippable":
            self._skip_then(int.from_bytes(header, "little"), ("magic", 4))
        elif state == "descriptor":
            fhd = header[0]
            if fhd & 0x08:
                raise self._corrupt("not valid zstd data (reserved bit set in a frame header)")
            self._single = bool(fhd & 0x20)
            self._checksum = bool(fhd & 0x04)
            self._fcs = _FCS_BYTES[fhd >> 6] or (1 if self._single else 0)
            self._dict = _DICT_ID_BYTES[fhd & 0x03]
            self._state, self._need = "frame", (0 if self._single else 1) + self._dict + self._fcs
        elif state == "frame":
            self._frames += 1
            self._check_window(self._window(header))
            self._state, self._need = "block", 3
        elif state == "block":
            value = int.from_bytes(header, "little")
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == 3:
                raise self._corrupt("not valid zstd data (reserved block type)")
            after = (("checksum", 4) if self._checksum else ("magic", 4)) if last else ("block", 3)
            self._skip_then(1 if kind == 1 else size, after)
        elif state == "checksum":
            self._state, self._need = "magic", 4

    def _skip_then(self, size: int, after: tuple[str, int]) -> None:
        if size:
            self._skip, self._after_skip = size, after
        else:
            self._state, self._need = after

    def _window(self, header: bytes) -> int:
        if self._single:  # the window is the whole content
            fcs = int.from_bytes(header[self._dict:], "little")
            return fcs + 256 if self._fcs == 2 else fcs
        exponent, mantissa = header[0] >> 3, header[0] & 7
        base = 1 << (10 + exponent)
        return base + (base >> 3) * mantissa

    def _check_window(self, window: int) -> None:
        if window > self._max_window:
            raise WindowTooLargeError(
                f"{self._path}: zstd frame {self._frames} declares a {window / MIB:.1f} MiB window, more "
                f"than the {self._max_window / MIB:.0f} MiB this job allows{self._hint}; decoding it would "
                "hold that much memory. Recompress it with a smaller window"
            )

    def finish(self) -> None:
        """Raise unless the stream ended at the end of a frame."""
        if self._offset == 0:
            raise CorruptInputError(f"{self._path}: empty file (0 bytes) is not a zstd stream")
        if self._state != "magic" or self._header or self._skip:
            raise CorruptInputError(f"{self._path}: zstd stream truncated (last frame incomplete)")
        if not self._frames:
            raise CorruptInputError(f"{self._path}: no zstd frame in the file (only skippable frames)")


class _Walked:
    """A file object whose bytes pass through a `_FrameWalker` as they are read."""

    def __init__(self, raw, walker: _FrameWalker):
        self._raw = raw
        self._walker = walker
        self._limit = FIRST_READ_BLOCK

    def read(self, size: int = -1) -> bytes:
        if size > self._limit:  # a short read is a read: the decompressor asks again for more
            size, self._limit = self._limit, min(2 * self._limit, READ_BLOCK)
        data = self._raw.read(size)
        self._walker.feed(data)
        return data


def zstd_blocks(raw, path: str, max_window: int, hint: str = "") -> Iterator[bytes]:
    """Decompressed blocks of at most OUT_BLOCK bytes of a zstd stream of one or more frames."""
    walker = _FrameWalker(path, max_window, hint)
    # max_window_size also makes libzstd itself refuse a larger window: a second line of defence.
    dctx = zstandard.ZstdDecompressor(max_window_size=max(max_window, 1 << 10))
    reader = dctx.stream_reader(_Walked(raw, walker), read_size=READ_BLOCK, read_across_frames=True, closefd=False)
    size = FIRST_OUT_BLOCK
    while True:
        try:
            block = reader.read(size)
        except zstandard.ZstdError as e:
            raise CorruptInputError(f"{redact_url(path)}: not valid zstd data ({e})") from None
        if not block:
            break
        yield block
        size = min(2 * size, OUT_BLOCK)
    walker.finish()


def gzip_blocks(raw, path: str) -> Iterator[bytes]:
    """Decompressed blocks of at most OUT_BLOCK bytes of a gzip stream."""
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            while block := f.read(OUT_BLOCK):
                yield block
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        raise CorruptInputError(f"{redact_url(path)}: gzip stream truncated or corrupt ({e})") from e


def plain_blocks(raw) -> Iterator[bytes]:
    """Blocks of at most READ_BLOCK bytes of an uncompressed file."""
    while block := raw.read(READ_BLOCK):
        yield block


def decompressed_blocks(raw, path: str, max_window: int, hint: str = "") -> Iterator[bytes]:
    """The decompressed content of `raw` in blocks of at most 1 MiB, by the file name's extension."""
    name = name_part(path).lower()
    if name.endswith((".zst", ".zstd")):
        return zstd_blocks(raw, path, max_window, hint)
    if name.endswith(".gz"):
        return gzip_blocks(raw, path)
    return plain_blocks(raw)
