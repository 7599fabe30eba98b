"""What the benchmarks share: the baseline loop, and timing a command with its memory.

The baseline is what one process does with no pipeline at all: zstd stream-decompress, split lines,
`json.loads`, one `sp.encode` per document (+1 for its EOS), so that every benchmark compares
against the same loop.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import threading
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bare_loop(pattern: str, model: str, part: str = "0/1") -> dict:
    """Run the loop over the files matching `pattern` (every `part` = "index/count" of them, sorted).

    Returns {"docs", "tokens", "bytes" (JSON lines), "wall", "cpu"} (seconds).
    """
    import sentencepiece as spm
    import zstandard

    sp = spm.SentencePieceProcessor(model_file=model)
    docs = tokens = size = 0
    index, count = (int(x) for x in part.split("/"))
    wall, cpu = time.perf_counter(), time.process_time()
    for path in sorted(glob.glob(pattern))[index::count]:
        with open(path, "rb") as f:
            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
            pending = b""
            while block := reader.read(1 << 20):
                lines = (pending + block).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line:
                        tokens += len(sp.encode(json.loads(line)["text"])) + 1
                        size += len(line)
                        docs += 1
            if pending:
                tokens += len(sp.encode(json.loads(pending)["text"])) + 1
                size += len(pending)
                docs += 1
    return {"docs": docs, "tokens": tokens, "bytes": size, "wall": time.perf_counter() - wall,
            "cpu": time.process_time() - cpu}


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Run a command; returns (seconds, peak RSS of its process tree, stdout)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    peak = 0
    ps = psutil.Process(proc.pid)
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, _tree_rss(ps))
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"{cmd} failed with {proc.returncode}")
    return time.monotonic() - start, peak, out
