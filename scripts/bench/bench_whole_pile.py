"""Per-core figures for sizing a whole-Pile run (docs/whole-pile.md), measured on real text.

    python scripts/bench/real_text_corpus.py /tmp/real            # ~200 MB of real text, Pile layout
    python scripts/bench/bench_whole_pile.py --corpus /tmp/real --model M.model [--repeats 3] [--json out.json]
        [--parts stages,pipeline,portable,writer,long_doc]

stages    CPU seconds of each step of the tokenize-and-pack work on the largest train file, one
          process, no Beam (scripts/bench/bench_tokenizer_backends.py's stage_costs), per backend.
pipeline  `pile-pipeline run` on DirectRunner (2 worker processes, whole files per worker): wall
          time and CPU seconds of the whole process tree, repeated; tokens per CPU-second.
portable  the same job through PortableRunner (embedded job service, one LOOPBACK SDK worker: the
          Fn API path and the chunk fan-out that Dataflow, Flink and Spark take), on 2 train files.
writer    WriteShardFn on a 256 MiB shard of 4 KiB records handed over lazily: MB/s and CPU.
long_doc  peak RSS of one process encoding a 64 MB real-text document with SentencePiece, whole
          and in pieces (pipeline/tokenize/pieces.py), and the time each took.
The machine's load average is printed with every timed row: on a shared machine, read the spread.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "bench"))
MB = 1 << 20


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str]) -> tuple[float, float, str]:
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start, _children_cpu() - cpu, proc.stderr


def stages(corpus: str, model: str) -> dict:
    """Per-step CPU on the largest train file."""
    from bench_tokenizer_backends import stage_costs

    path = max(glob.glob(os.path.join(corpus, "train", "*.jsonl.zst")), key=os.path.getsize)
    import zstandard

    with open(path, "rb") as f:
        text_bytes = len(zstandard.ZstdDecompressor().stream_reader(f).read())
    out = {}
    for backend in ("sentencepiece", "gigatoken", "kitoken"):
        try:
            cost = stage_costs(path, model, [backend])
        except Exception as e:  # a backend that is not installed
            print(f"  {backend}: {e}", file=sys.stderr)
            continue
        out[backend] = {**cost, "bytes": text_bytes, "load": os.getloadavg()[0]}
    return {"file": path, "by_backend": out}


def pipeline(corpus: str, model: str, repeats: int, runner: list[str], files: int | None) -> dict:
    """Whole-job wall and CPU, repeated."""
    pattern = os.path.join(corpus, "train", "*.jsonl.zst")
    inputs = sorted(glob.glob(pattern))[:files] if files else [pattern]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-whole-pile-") as tmp:
        for _ in range(repeats):
            out = os.path.join(tmp, "out")
            load = os.getloadavg()[0]
            wall, cpu, _ = _run([sys.executable, "-m", "pipeline.run", "--input", *inputs, "--output_dir", out,
                                 "--tokenizer_model", model, "--overwrite", *runner])
            with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
                manifest = json.load(f)
            tokens = sum(s.get("tokens", 0) for s in manifest["subsets"].values())
            text = sum(s.get("text_bytes", 0) for s in manifest["subsets"].values())
            rows.append({"wall": wall, "cpu": cpu, "tokens": tokens, "json_bytes": text, "load": load,
                         "records": manifest["totals"]["records"], "bytes_out": manifest["totals"]["bytes"]})
    med = {k: statistics.median(r[k] for r in rows) for k in ("wall", "cpu")}
    return {"runs": rows, "median": med, "runner": runner, "inputs": inputs}


def writer() -> dict:
    """WriteShardFn on a 256 MiB shard of 4 KiB records, from a lazily made group."""
    import numpy as np

    from pipeline.beam.tfrecord.shards import WriteShardFn
    from pipeline.config.job import PipelineConfig
    from pipeline.core.shuffle import Permutation, ShardPlan
    from pipeline.format.framing import FramedRecords

    payload = 4096
    n = 256 * MB // (payload + 16)
    positions = Permutation(n, 1)(np.arange(n))
    blocks = [FramedRecords.of(np.full(payload // 8, p, "<i8").tobytes() for p in positions[s:s + 64].tolist())
              for s in range(0, n, 64)]  # made first: only the writer is timed
    groups = [(positions[s:s + 64].astype("<i8").tobytes(), b) for s, b in zip(range(0, n, 64), blocks, strict=True)]
    with tempfile.TemporaryDirectory(prefix="bench-writer-") as tmp:
        config = PipelineConfig(inputs=("x",), output_dir=tmp, tokenizer_model="m")
        load = os.getloadavg()[0]
        cpu, start = time.process_time(), time.perf_counter()
        (info,) = WriteShardFn(config, payload + 16).process((0, iter(groups)), ShardPlan(n, 1))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"bytes": info["bytes"], "records": n, "wall": wall, "cpu": cpu, "load": load}


_LONG_DOC = """
import resource, sys, time
import numpy as np
from pipeline.tokenize.engines import SentencePieceEngine
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.pieces import PieceEncoder
tok = load_tokenizer(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
engine = SentencePieceEngine(tok, threads=1)
encoder = PieceEncoder(engine, tok) if sys.argv[3] == "pieces" else engine
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
ids, offsets = encoder.encode([text])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, base * 1024, time.perf_counter() - start,
      int(offsets[-1]), len(text.encode()))
"""


def long_doc(corpus: str, model: str, mb: int = 64) -> dict:
    """Peak RSS and time of encoding one `mb` MB real-text document, whole and in pieces."""
    import zstandard

    texts = []
    for path in sorted(glob.glob(os.path.join(corpus, "train", "*.jsonl.zst"))):
        with open(path, "rb") as f:
            for line in zstandard.ZstdDecompressor().stream_reader(f).read().split(b"\n"):
                if line:
                    texts.append(json.loads(line)["text"])
    doc, size = [], 0
    for text in texts:  # documents one after another, as a book of chapters
        doc.append(text)
        size += len(text.encode())
        if size >= mb * MB:
            break
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-long-doc-") as tmp:
        path = os.path.join(tmp, "doc.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n\n".join(doc))
        for how in ("whole", "pieces"):
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, "-c", _LONG_DOC, model, path, how], cwd=REPO, capture_output=True,
                                  text=True, env=dict(os.environ, PYTHONPATH=REPO))
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            peak, base, seconds, tokens, size = proc.stdout.split()
            out[how] = {"peak_rss": int(peak), "rss_before": int(base), "seconds": float(seconds),
                        "tokens": int(tokens), "bytes": int(size), "load": load}
    assert out["whole"]["tokens"] == out["pieces"]["tokens"]
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the chosen parts; print and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="stages,pipeline,portable,writer,long_doc")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    result: dict = {"cpus": os.cpu_count()}
    if "stages" in parts:
        result["stages"] = stages(args.corpus, args.model)
    if "pipeline" in parts:
        result["pipeline"] = pipeline(args.corpus, args.model, args.repeats,
                                      ["--runner", "DirectRunner", "--direct_num_workers", "2"], None)
    if "portable" in parts:
        result["portable"] = pipeline(args.corpus, args.model, args.repeats,
                                      ["--config", os.path.join(REPO, "beam_configs", "portable_embed.toml")], 2)
    if "writer" in parts:
        result["writer"] = [writer() for _ in range(args.repeats)]
    if "long_doc" in parts:
        result["long_doc"] = long_doc(args.corpus, args.model)
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return result


if __name__ == "__main__":
    main()
