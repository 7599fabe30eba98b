"""The benchmarks' baseline: what one process does with no pipeline at all.

zstd stream-decompress, split lines, `json.loads`, one `sp.encode` per document (+1 for its EOS).
Shared by bench_pipeline.py and bench_tokenizer_backends.py so both compare against the same loop.
"""

from __future__ import annotations

import glob
import json
import time


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
