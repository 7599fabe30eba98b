"""Untrusted compressed input stays bounded: memory is set by --max_line_mb and --chunk_mb, not by the file.

The bound, for the process that reads a file (a Beam worker runs exactly this code):

    peak RSS - RSS before reading  <=  W + 2 L + C + 16 MiB

with L = --max_line_mb, C = --chunk_mb and W = the largest window a zstd frame may declare,
max(8 MiB, 2 L). Where it comes from: W is the decoder's window (libzstd allocates what a frame
declares, and touches all of it once the output is longer); a line is assembled from 1 MiB blocks
up to L, and joined once (2 L); a chunk holds at most C + L of lines; 16 MiB covers the read and
output blocks, libzstd's and zlib's buffers and the interpreter's own growth. A longer line is
counted, never held (only its first 480 bytes are kept, for the dead letter). A frame that declares
a larger window is refused before any of it is decoded, naming the file and the window.

Each case decompresses to up to 2 GiB from a file of a few KB to a few MB (ratios up to ~30000:1),
in a fresh process whose peak RSS is its high-water mark (the kernel's VmHWM, exact) against its
RSS after imports (psutil). Without these bounds the same files made a worker peak at several GB.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import psutil
import pytest
import zstandard
from corpus_helpers import pile_line, write_lines
from fault_helpers import MODEL, PROCESSES, command_env

from pipeline.io import inputs
from pipeline.io.decompress import CorruptInputError, WindowTooLargeError, zstd_blocks

MIB = 1 << 20
GIB = 1 << 30
SLACK = 16 * MIB

# Runs in a fresh process: read one file as a worker does, print the counts and the memory used.
# The peak is the process's VmHWM (the kernel's high-water mark of its RSS, new at exec; getrusage's
# ru_maxrss would also count what the forking parent held).
_PROBE = """
import json, sys
import psutil
from pipeline.io import inputs
path, chunk_bytes, line_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
before = psutil.Process().memory_info().rss
out = {"lines": 0, "oversized": [], "error": None}
try:
    for chunk in inputs.iter_chunks(path, 0, chunk_bytes, line_bytes):
        out["lines"] += len(chunk.lines)
        out["oversized"] += [line.oversized for line in chunk.lines if line.oversized]
except inputs.CorruptInputError as e:
    out["error"] = f"{type(e).__name__}: {e}"
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
out["growth"] = peak - before
print(json.dumps(out))
"""


def bound(line_bytes: int, chunk_bytes: int) -> int:
    """The stated bound on a reading process's memory growth (see the module docstring)."""
    return inputs.max_window_bytes(line_bytes) + 2 * line_bytes + chunk_bytes + SLACK


def read_in_fresh_process(path: Path, line_bytes: int, chunk_bytes: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(path), str(chunk_bytes), str(line_bytes)],
                          env=command_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# Hand-built zstd frames (RFC 8878), decoded by the real libzstd: they declare exactly the window
# asked for, which no compressor does for a few KB of input.
def rle_frame(length: int, window_log: int | None = None, single_segment: bool = False, fill: bytes = b"a",
              tail: bytes = b"\n") -> bytes:
    """One frame: `length` bytes of `fill` in RLE blocks (4 bytes each per 128 KB), then `tail` raw."""
    out = [struct.pack("<I", 0xFD2FB528)]
    if single_segment:  # no window descriptor: the window is the whole content (8-byte content size)
        out.append(bytes([0xE0]) + struct.pack("<Q", length + len(tail)))
        block = 128 << 10
    else:
        out.append(bytes([0x00, (window_log - 10) << 3]))
        block = min(128 << 10, 1 << window_log)
    left = length
    while left:
        n = min(block, left)
        left -= n
        out.append((0b010 | n << 3).to_bytes(3, "little") + fill)  # RLE block, not last
    out.append((0b001 | len(tail) << 3).to_bytes(3, "little") + tail)  # raw block, last
    return b"".join(out)


def test_hand_built_frames_are_real_zstd():
    frame = rle_frame(3 * MIB, window_log=20)
    params = zstandard.get_frame_parameters(frame)
    assert params.window_size == 1 * MIB
    data = zstandard.ZstdDecompressor().stream_reader(frame, read_across_frames=True).readall()
    assert data == b"a" * 3 * MIB + b"\n"
    assert zstandard.get_frame_parameters(rle_frame(10, single_segment=True)).content_size == 11


def _good_lines(n: int) -> bytes:
    return b"".join(pile_line(f"good document {i} " * 20) + b"\n" for i in range(n))


def _zstd(data_blocks, level: int = 1) -> bytes:
    cobj = zstandard.ZstdCompressor(level=level).compressobj()
    return b"".join([*(cobj.compress(b) for b in data_blocks), cobj.flush()])


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """name -> (file, decompressed size): several ratios and kinds of content, zstd and gzip."""
    root = tmp_path_factory.mktemp("bombs")
    good = _good_lines(20)
    made = {}

    def put(name, data, size):
        path = root / name
        path.write_bytes(data)
        made[name] = (path, size)

    # One 2 GiB line after good lines, in a frame declaring the largest window allowed at L = 1 MiB.
    head = zstandard.ZstdCompressor(level=3).compress(good)
    put("one-huge-line-rle.jsonl.zst", head + rle_frame(2 * GIB, window_log=23), len(good) + 2 * GIB + 1)
    # Real compressor: 512 MiB of zeros in one line.
    zeros = b"\0" * (8 * MIB)
    put("zeros.jsonl.zst", _zstd([good, *[zeros] * 64, b"\n"]), len(good) + 512 * MIB + 1)
    # Real compressor: many lines, each under the line limit (600 x 900 KB): chunk after chunk.
    line = pile_line("x" * (900 << 10)) + b"\n"
    put("many-long-lines.jsonl.zst", _zstd([line] * 600, level=3), 600 * len(line))
    # Real compressor, barely compressible text: 96 MiB in one line (ratio ~2).
    letters = bytes(b"abcdefghijklmnopqrstuvwxyz "[i % 27] for i in range(256))
    text = random.Random(0).randbytes(96 * MIB).translate(letters)
    put("text-line.jsonl.zst", _zstd([good, text, b"\n"]), len(good) + 96 * MIB + 1)
    # gzip: 1 GiB in one line (deflate's ratio tops out near 1000:1).
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = b"a" * (8 * MIB)
    put("gzip-line.jsonl.gz", comp.compress(good) + b"".join(comp.compress(block) for _ in range(128))
        + comp.compress(b"\n") + comp.flush(), len(good) + GIB + 1)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("name", ["one-huge-line-rle.jsonl.zst", "zeros.jsonl.zst", "many-long-lines.jsonl.zst",
                                  "text-line.jsonl.zst", "gzip-line.jsonl.gz"])
def test_memory_is_bounded_whatever_the_ratio(bombs, name):
    path, size = bombs[name]
    line_bytes, chunk_bytes = 1 * MIB, MIB // 4
    got = read_in_fresh_process(path, line_bytes, chunk_bytes)
    assert got["error"] is None
    assert size / path.stat().st_size > 1.5  # a compressed file, from ~2:1 to ~30000:1
    if name.startswith("many"):
        assert got["lines"] == 600 and got["oversized"] == []
    else:  # 20 good lines, then one line longer than the limit, counted to the byte, never held
        assert got["lines"] == 21 and got["oversized"] == [size - len(_good_lines(20)) - 1]
    assert got["growth"] <= bound(line_bytes, chunk_bytes), (name, got["growth"] / MIB)


@pytest.mark.slow
def test_memory_is_bounded_at_the_default_limits(tmp_path):
    """--max_line_mb 64, --chunk_mb 4: a 1 GiB line in a frame declaring the 128 MiB window allowed."""
    path = tmp_path / "long.jsonl.zst"
    path.write_bytes(rle_frame(GIB, window_log=27))
    got = read_in_fresh_process(path, 64 * MIB, 4 * MIB)
    assert got["error"] is None and got["oversized"] == [GIB]
    assert got["growth"] <= bound(64 * MIB, 4 * MIB), got["growth"] / MIB


@pytest.mark.slow
@pytest.mark.parametrize("frame,window", [
    (rle_frame(64 * MIB, window_log=24), 16 * MIB),  # just over the 8 MiB allowed at L = 1 MiB
    (rle_frame(64 * MIB, window_log=27), 128 * MIB),  # zstd --long
    (rle_frame(2 * GIB, window_log=31), 2 * GIB),  # zstd --long=31: the largest there is
    (rle_frame(GIB, single_segment=True), GIB + 1),  # no window descriptor: the whole content is the window
])
def test_a_frame_declaring_a_larger_window_is_refused_before_decoding(tmp_path, frame, window):
    path = tmp_path / "window.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_good_lines(5)) + frame)
    got = read_in_fresh_process(path, 1 * MIB, MIB // 4)
    assert got["error"].startswith("WindowTooLargeError: ")
    assert str(path) in got["error"] and "zstd frame 2 declares a" in got["error"]
    assert f"{window / MIB:.1f} MiB window, more than the 8 MiB this job allows" in got["error"]
    assert got["lines"] == 0  # the lines before it are in the same chunk, which never completed
    assert got["growth"] <= SLACK  # refused from its header: nothing of the window was allocated


def test_truncation_anywhere_is_an_error_and_frame_boundaries_are_not(tmp_path):
    """Cut a 3-frame file (with a skippable frame and checksums) at every byte: each cut either
    raises "truncated" naming the file, or falls exactly on a frame boundary and gives those frames."""
    texts = [_good_lines(n) for n in (3, 1, 4)]
    frames = [zstandard.ZstdCompressor(level=3, write_checksum=True).compress(t) for t in texts]
    skippable = struct.pack("<II", 0x184D2A5E, 6) + b"notes!"
    parts = [frames[0], skippable, frames[1], frames[2]]
    blob = b"".join(parts)
    ends = {sum(len(p) for p in parts[:i + 1]): b"".join(texts[:[1, 1, 2, 3][i]]) for i in range(len(parts))}
    for cut in range(len(blob) + 1):
        path = tmp_path / "cut.jsonl.zst"
        path.write_bytes(blob[:cut])
        try:
            with open(path, "rb") as raw:
                data = b"".join(zstd_blocks(raw, str(path), 8 * MIB))
        except CorruptInputError as e:
            assert cut not in ends and str(path) in str(e), cut
            assert ("truncated" in str(e)) or ("empty file" in str(e) and cut == 0), (cut, str(e))
        else:
            assert data == ends[cut], cut


def test_damaged_headers_are_named(tmp_path):
    frame = zstandard.ZstdCompressor(level=3).compress(_good_lines(5))
    cases = {
        "reserved bit": frame[:4] + bytes([frame[4] | 0x08]) + frame[5:],
        "no frame magic": frame + b"this is text, not zstd",
    }
    for what, blob in cases.items():
        path = tmp_path / f"{what.replace(' ', '-')}.jsonl.zst"
        path.write_bytes(blob)
        with pytest.raises(CorruptInputError, match=f"{path.name}.*not valid zstd data") as caught:
            with open(path, "rb") as raw:
                b"".join(zstd_blocks(raw, str(path), 8 * MIB))
        assert not isinstance(caught.value, WindowTooLargeError)


# Every Frame_Header_Descriptor a frame can have: single segment or not (a window descriptor or
# none), each Dictionary_ID field size and each Frame_Content_Size field size.
_DICT_ID_SIZES = (0, 1, 2, 4)
HEADER_SHAPES = [(single, dict_flag, fcs_flag) for single in (False, True) for dict_flag in range(4)
                 for fcs_flag in range(4)]


def _fcs_size(single: bool, fcs_flag: int) -> int:
    return (0, 2, 4, 8)[fcs_flag] or (1 if single else 0)


def shaped_frame(content: bytes, single: bool, dict_flag: int, fcs_flag: int, *, window_byte: int = 0x53,
                 dict_id: int = 0, declared: int | None = None) -> bytes:
    """One frame of `content` in a raw block, its header of the given shape (RFC 8878 3.1.1.1).

    window_byte: the window descriptor when not single segment (0x53: 2^20 + 3/8 of it, 1.375 MiB).
    declared: the content size the header declares (default: the content's); a single-segment
    frame's window.
    """
    size = len(content) if declared is None else declared
    header = struct.pack("<IB", 0xFD2FB528, fcs_flag << 6 | single << 5 | dict_flag)
    if not single:
        header += bytes([window_byte])
    header += dict_id.to_bytes(_DICT_ID_SIZES[dict_flag], "little")
    fcs_size = _fcs_size(single, fcs_flag)
    if fcs_size:
        header += (size - 256 if fcs_size == 2 else size).to_bytes(fcs_size, "little")  # 2 bytes: 256 + value
    return header + (0b001 | len(content) << 3).to_bytes(3, "little") + content


def _shaped_content(single: bool, fcs_flag: int) -> bytes:
    # A 1-byte content size holds at most 255; a 2-byte one at least 256.
    return _good_lines(1)[:200] if _fcs_size(single, fcs_flag) == 1 else _good_lines(3)[:700]


def _read_zstd(tmp_path, blob: bytes, max_window: int) -> bytes:
    path = tmp_path / "shaped.jsonl.zst"
    path.write_bytes(blob)
    with open(path, "rb") as raw:
        return b"".join(zstd_blocks(raw, str(path), max_window))


def test_hand_built_frames_of_every_header_shape_are_real_zstd():
    for single, dict_flag, fcs_flag in HEADER_SHAPES:
        content = _shaped_content(single, fcs_flag)
        frame = shaped_frame(content, single, dict_flag, fcs_flag, dict_id=7 if dict_flag else 0)
        params = zstandard.get_frame_parameters(frame)
        assert params.dict_id == (7 if dict_flag else 0)
        assert params.window_size == (len(content) if single else 11 << 17)
        assert params.content_size == (len(content) if _fcs_size(single, fcs_flag) else zstandard.CONTENTSIZE_UNKNOWN)


@pytest.mark.parametrize("single,dict_flag,fcs_flag", HEADER_SHAPES)
def test_every_header_shape_decodes_up_to_its_window_and_is_refused_past_it(tmp_path, single, dict_flag, fcs_flag):
    content = _shaped_content(single, fcs_flag)
    first = zstandard.ZstdCompressor().compress(b"first\n")
    window = len(content) if single else 11 << 17
    # Dictionary id 0 (no dictionary) is valid with any field size: the frame decodes.
    blob = first + shaped_frame(content, single, dict_flag, fcs_flag)
    assert _read_zstd(tmp_path, blob, window) == b"first\n" + content
    # One byte less allowed: refused from the header, whatever the id's bytes.
    for dict_id in (0, (1 << 8 * _DICT_ID_SIZES[dict_flag]) - 1):
        blob = first + shaped_frame(content, single, dict_flag, fcs_flag, dict_id=dict_id)
        with pytest.raises(WindowTooLargeError, match=f"zstd frame 2 declares a {window / MIB:.1f} MiB window"):
            _read_zstd(tmp_path, blob, window - 1)


@pytest.mark.parametrize("single,dict_flag,fcs_flag", [shape for shape in HEADER_SHAPES
                                                       if not shape[0] or _fcs_size(*shape[::2]) >= 4])
def test_a_2_gib_window_is_refused_by_name_with_every_header_shape(tmp_path, single, dict_flag, fcs_flag):
    # Not single segment: window descriptor 2^31. Single segment: a declared content size of 2 GiB.
    content = _shaped_content(single, fcs_flag)
    frame = shaped_frame(content, single, dict_flag, fcs_flag, window_byte=21 << 3,
                         dict_id=(1 << 8 * _DICT_ID_SIZES[dict_flag]) - 1, declared=2 * GIB if single else None)
    blob = zstandard.ZstdCompressor().compress(b"first\n") + frame
    with pytest.raises(WindowTooLargeError, match="zstd frame 2 declares a 2048.0 MiB window, more than the 8 MiB"):
        _read_zstd(tmp_path, blob, 8 * MIB)


def test_frames_of_many_rle_and_raw_blocks_are_followed_to_their_end(tmp_path):
    # Three RLE blocks (one byte of content each) and a raw last block, twice: the walker must skip
    # exactly each block's bytes and find the second frame's magic after the first's last block.
    frame = rle_frame(300 << 10, window_log=17)
    assert _read_zstd(tmp_path, frame + frame, 8 * MIB) == 2 * (b"a" * (300 << 10) + b"\n")


def test_damaged_headers_are_named_with_their_compressed_offset(tmp_path):
    # After more than one read's worth of compressed bytes (a 1.5 MiB skippable frame, then a frame),
    # so that the offset counts the bytes of earlier reads too.
    good = zstandard.ZstdCompressor(level=3).compress(_good_lines(5))
    head = struct.pack("<II", 0x184D2A50, 3 * MIB // 2) + bytes(3 * MIB // 2) + good
    block = 4 + 1 + 1  # magic, descriptor, window descriptor: the first block header's offset
    damaged = shaped_frame(b"x" * 10, False, 0, 0)
    cases = {
        "reserved bit set in a frame header": (damaged[:4] + bytes([damaged[4] | 0x08]) + damaged[5:], 4),
        "reserved block type": (damaged[:block] + bytes([damaged[block] | 0b110]) + damaged[block + 1:], block),
        "no frame magic number": (b"this is text, not zstd", 0),
    }
    for what, (tail, at) in cases.items():
        with pytest.raises(CorruptInputError, match="not valid zstd data") as caught:
            _read_zstd(tmp_path, head + tail, 8 * MIB)
        assert f"({what}) (at compressed byte {len(head) + at})" in str(caught.value)
        assert not isinstance(caught.value, WindowTooLargeError)


@pytest.mark.slow
def test_a_worker_reading_a_bomb_stays_bounded(tmp_path):
    """End to end: the job's own worker processes, a file that decompresses to 2 GiB from 66 KB.

    Bound: every process of the job (the driver and two workers, each ~230 MiB with Beam and
    SentencePiece loaded, plus the bound above: 26 MiB here) stays under 512 MiB, while the one line
    alone is 2 GiB (reading it whole took over 4 GiB); the line becomes one dead letter of reason
    line_too_long with its exact length.
    """
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "00.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_good_lines(40)) +
                                       rle_frame(2 * GIB, window_log=23))
    write_lines(str(inp / "01.jsonl.zst"), [pile_line(f"more good text {i} " * 30) for i in range(40)])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", "--input", str(inp / "*.jsonl.zst"),
                             "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "64",
                             "--max_line_mb", "1", "--chunk_mb", "0.25", "--max_dead_letter_fraction", "0.05",
                             *PROCESSES], env=command_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    peaks: dict[int, int] = {}

    def watch():
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                for p in [root, *root.children(recursive=True)]:
                    with open(f"/proc/{p.pid}/status") as f:
                        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
                    peaks[p.pid] = max(peaks.get(p.pid, 0), hwm)
            except (psutil.Error, OSError, StopIteration):
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    _, stderr = proc.communicate(timeout=300)
    watcher.join()
    assert proc.returncode == 0, stderr[-3000:]
    assert len(peaks) >= 3  # the driver and its two worker processes were watched
    assert max(peaks.values()) < 512 * MIB, {pid: peak // MIB for pid, peak in peaks.items()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dead_letters"]["by_reason"] == {"line_too_long": 1}
    (dead,) = manifest["dead_letters"]["files"]
    (letter,) = [json.loads(line) for line in (out / dead["path"]).read_text().splitlines()]
    assert letter["line"] == 41 and str(2 * GIB) in letter["detail"] and letter["prefix"] == "a" * 120
    assert os.path.getsize(inp / "00.jsonl.zst") < 100_000


def test_gzip_reader_is_the_bounded_one():
    """gzip keeps its bound: GzipFile.read(n) never returns more than n bytes, whatever the ratio."""
    data = gzip.compress(b"a" * (64 * MIB), compresslevel=1)
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
        assert max(len(b) for b in iter(lambda: f.read(MIB), b"")) == MIB
