"""Helpers for tests that write Pile-format corpora and compare what runs wrote."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re

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


_RUN_DIR = re.compile(r"run-[0-9a-f]{16}/")


def run_free(value):
    """A manifest, shard list or path without the run id and run directory (pipeline/io/outputs.py).

    Every run writes into a directory of its own; what two runs of the same input and config share
    byte for byte is everything else.
    """
    if isinstance(value, str):
        return _RUN_DIR.sub("", value)
    value = json.loads(_RUN_DIR.sub("", json.dumps(value)))
    if isinstance(value, dict):
        value.pop("run_id", None)
    return value


def file_digest(path) -> str:
    """A file's sha256; TFDS's dataset_info.json (its shard template names the run directory) run-free."""
    data = path.read_bytes()
    if path.name == "dataset_info.json":
        data = run_free(data.decode()).encode()
    return hashlib.sha256(data).hexdigest()


def output_digests(out) -> dict:
    """Every file's sha256 by path under `out` (a Path), run-free: what two runs of one job share byte for byte."""
    digests = {}
    for p in sorted(out.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == "manifest.json":
                data = json.dumps(run_free(json.loads(data)), sort_keys=True).encode()
            elif p.name == "dataset_info.json":  # TFDS's shard template names the run directory
                data = run_free(data.decode()).encode()
            digests[run_free(str(p.relative_to(out)))] = hashlib.sha256(data).hexdigest()
    return digests


@contextlib.contextmanager
def rss_growth():
    """A one-item list holding, once the block ends, how far this process's RSS rose above its start (bytes).

    Sampled every 0.2 s by a thread, so a peak shorter than that can be missed.
    """
    import threading

    import psutil

    proc = psutil.Process()
    base, peak, done = proc.memory_info().rss, [0], threading.Event()
    grown = [0]

    def watch():
        while not done.wait(0.2):
            peak[0] = max(peak[0], proc.memory_info().rss)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield grown
    finally:
        done.set()
        watcher.join()
        grown[0] = max(peak[0], proc.memory_info().rss) - base


def random_words(rng, n: int) -> str:
    """n words drawn from a 5,000-word vocabulary ("w17 w4032 ..."): texts with a known overlap."""
    return " ".join(f"w{i}" for i in rng.integers(0, 5000, n))


def edit_word(text: str, position: int, word: str) -> str:
    """`text` with its word at `position` replaced by `word`: a near copy."""
    words = text.split()
    words[position] = word
    return " ".join(words)


def megatron_sequences(out, manifest: dict | None = None) -> list:
    """Each document of a Megatron output (its EOS included) as a numpy array of its ids, in file order."""
    import numpy as np

    from pipeline.format import megatron as fmt

    manifest = manifest or fmt.load_manifest(str(out))
    sequences = []
    for shard in manifest["shards"]:
        index = fmt.read_index((out / shard["idx"]["path"]).read_bytes())
        data = np.frombuffer((out / shard["bin"]["path"]).read_bytes(), index.dtype)
        for pointer, length in zip(index.pointers.tolist(), index.lengths.tolist(), strict=True):
            start = pointer // index.dtype.itemsize
            sequences.append(data[start : start + length])
    return sequences


def odd_corpus(root, last_text: str = "caf\u00e9 \u6570\u636e and a last good one"):
    """3 train files in the Pile's layout under `root` (one with a ~1.2 MB document) + 03.jsonl.zst of odd lines.

    The odd file: a good document, a line that is not JSON, a text that is not a string, a blank
    text, an unknown subset, and `last_text` as its last good document. Returns `root`.
    """
    from sample_corpus import write_sample_corpus

    write_sample_corpus(str(root), train_files=3, docs_per_file=40)
    odd = [pile_line("first good document", "Github"), b"not json", b'{"text": 5, "meta": {}}',
           pile_line("   \n", "ArXiv"), pile_line("unknown", "CommonCrawl"), pile_line(last_text, "ArXiv")]
    write_lines(str(root / "train" / "03.jsonl.zst"), odd)
    return root
