"""Helpers for tests that write Pile-format corpora."""

from __future__ import annotations

import gzip
import json
import os

import zstandard

FAST_BEAM = ["--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


def pile_line(text, subset="Pile-CC") -> bytes:
    return json.dumps({"text": text, "meta": {"pile_set_name": subset}}, ensure_ascii=False).encode()


def write_lines(path: str, lines: list[bytes], compression: str = "zst") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = b"".join(line + b"\n" for line in lines)
    if compression == "zst":
        data = zstandard.ZstdCompressor().compress(data)
    elif compression == "gz":
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)
    return path
