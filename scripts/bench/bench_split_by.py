"""What `--split_by` costs: the same fastText job with and without it, side by side.

    python scripts/bench/bench_split_by.py [--mb 60] [--rounds 2] [--bins 10] [--work DIR]

The kinds corpus (real_text_corpus.py --shape kinds, `--mb` MB of JSON lines): train-classifier learns
prose against the other kinds from the even documents; the odd ones, in four files, are the job's
input. Each round runs `pile-pipeline run --filters fasttext_classifier` (the sample SentencePiece
model, seq_len 512, DirectRunner, one worker in memory) into one output, then the same with
`--split_by fasttext.hq` into `--bins` buckets; wall time and the job process's CPU seconds
(its own and its children's) of each run. The stages run once per document either way, so the
split's extra cost is its per-bucket packing, plans and manifests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO, HERE]

import real_text_corpus  # noqa: E402

from pipeline.io.publish import publish  # noqa: E402


def _prepare(work: str, mb: float) -> str:
    """The classifier and the job's input in `work`; returns the model's path."""
    model = os.path.join(work, "hq.bin")
    if os.path.exists(model):
        return model
    docs = [json.loads(line) for line in real_text_corpus.compose(int(mb * 1e6), seed=3, shape="kinds")]
    train, job = docs[0::2], docs[1::2]
    for name, keep in (("pos", True), ("neg", False)):
        with open(os.path.join(work, f"{name}.jsonl"), "w") as f:
            f.writelines(json.dumps({"text": d["text"]}) + "\n" for d in train
                         if (d["meta"]["pile_set_name"] == "prose") == keep)
    subprocess.run([sys.executable, "-m", "pipeline.cli.main", "train-classifier", "--positive",
                    os.path.join(work, "pos.jsonl"), "--negative", os.path.join(work, "neg.jsonl"), "--model", model,
                    "--dim", "16", "--epoch", "10"], check=True, capture_output=True, cwd=REPO)
    import zstandard

    for f in range(4):
        data = "".join(json.dumps(d) + "\n" for d in job[f::4]).encode()
        publish(os.path.join(work, "in", f"{f:02d}.jsonl.zst"), [zstandard.ZstdCompressor().compress(data)])
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60.0, help="MB of the kinds corpus (half is the job's input)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bins", type=int, default=10, help="--fasttext_score_bins: the buckets")
    parser.add_argument("--work", default=None, help="a folder kept between runs (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="bench_split_by-")
    model = _prepare(work, args.mb)
    base = ["--input", os.path.join(work, "in", "*.jsonl.zst"), "--tokenizer_model",
            os.path.join(REPO, "tokenizers", "sample", "sample.model"), "--subset_names", "any", "--seq_len", "512",
            "--filters", "fasttext_classifier", "--fasttext_model", model, "--fasttext_score_bins", str(args.bins),
            "--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1",
            "--overwrite"]
    print("| run | wall s | CPU s |\n|---|---|---|")
    for _ in range(args.rounds):
        for name, extra in (("one output", []), (f"--split_by fasttext.hq ({args.bins} bins)",
                                                 ["--split_by", "fasttext.hq"])):
            before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
            subprocess.run([sys.executable, "-m", "pipeline.run", *base, "--output_dir",
                            os.path.join(work, "split" if extra else "plain"), *extra],
                           check=True, capture_output=True, cwd=REPO)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(f"| {name} | {time.monotonic() - start:.1f} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
