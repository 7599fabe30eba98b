"""The classifier stages' speed against their limits (bare loops of the same model) and against datatrove.

    python scripts/bench/bench_classifiers.py [--mb 6] [--rounds 2] [--real_docs 64] [--skip_real]

One core (torch on one thread), the same documents on every side, each side run `--rounds` times in
turn (CPU seconds by time.process_time; the model loaded and one document scored before the clock):

  fasttext_classifier  our stage's apply_many on the kinds corpus (real_text_corpus.py --shape kinds) with
                       a model train-classifier's recipe trains on it, vs the bare loop
                       `model.predict(text.strip().replace("\\n", ""), k=-1)` (the limit), vs datatrove's
                       FastTextClassifierFilter.run() (in .venv-datatrove, scripts/bench/datatrove_classifiers.py)
  url_filter           our stage on this machine's URLs and crafted ones (url_cases.py) with datatrove's word
                       lists and a sample of its domains, vs datatrove's URLFilter.run()
  hf_classifier        our stage on a FineWeb-Edu-shaped model (classifier_models.py: tiny, and with
                       --real_docs N the real size, random weights) vs the bare loop of the same model over
                       the same texts sorted by token count in batches (the limit), and that loop unsorted
                       (the gain of sorting by length)

Prints one Markdown table; `docs/s` = documents / CPU s.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO, HERE, os.path.join(REPO, "scripts", "datagen")]
DATATROVE = os.path.join(REPO, ".venv-datatrove", "bin", "python")

import classifier_models  # noqa: E402
import real_text_corpus  # noqa: E402
import url_cases  # noqa: E402


def cpu(fn) -> float:
    """CPU seconds of fn()."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def datatrove_time(kind: str, items: list[dict], folder: str, *args: str) -> float:
    """datatrove's CPU seconds over the items (its --time mode, one untimed document first)."""
    path = os.path.join(folder, f"{kind}.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(item) + "\n" for item in items)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HOME": os.path.join(folder, "hf")}
    out = subprocess.run([DATATROVE, os.path.join(HERE, "datatrove_classifiers.py"), kind, path,
                          os.path.join(folder, "t.json"), "--time", *args], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.split("TIME ", 1)[1])["seconds"]


def rows_fasttext(texts: list[str], folder: str, rounds: int) -> list[tuple]:
    """Our stage vs the bare predict loop vs datatrove."""
    import fasttext

    from pipeline.stages import classifier_training as recipe
    from pipeline.stages.base import Doc
    from pipeline.stages.fasttext_classifier import FastTextClassifier, FastTextClassifierOptions

    model_path = os.path.join(folder, "hq.bin")
    positive = [t for i, t in enumerate(texts) if i % 3 == 0]
    negative = [t for i, t in enumerate(texts) if i % 3]
    recipe.train(positive, negative, model_path, recipe.FastTextSettings(), 0.1)
    stage = FastTextClassifier(FastTextClassifierOptions(fasttext_model=model_path,
                                                         fasttext_keep_labels=(("hq", 0.5),)))
    stage.setup()
    docs = [Doc(t, "s", 0, i + 1) for i, t in enumerate(texts)]
    model = fasttext.load_model(model_path)
    model.predict("warm up", k=-1)

    def bare():
        for text in texts:
            model.predict(text.strip().replace("\n", ""), k=-1)

    ours, limit, theirs = [], [], []
    for _ in range(rounds):
        limit.append(cpu(bare))
        ours.append(cpu(lambda: stage.apply_many(docs)))
        theirs.append(datatrove_time("fasttext", [{"text": t} for t in texts], folder, "--model", model_path,
                                     "--keep", "hq:0.5"))
    return [("fasttext_classifier", len(texts), min(ours), min(limit), min(theirs))]


def rows_url(folder: str, rounds: int) -> list[tuple]:
    """Our URL filter vs datatrove's, datatrove's word lists and a sample of its domains."""
    from pipeline.core.documents import Line
    from pipeline.stages.base import Doc
    from pipeline.stages.url_filter import UrlFilter, UrlFilterOptions

    (assets,) = glob.glob(os.path.join(REPO, ".venv-datatrove", "lib", "python3.*", "site-packages", "datatrove",
                                       "assets"))
    real = url_cases.real_urls(2500)
    urls = (real + url_cases.crafted()) * 4
    lists = os.path.join(folder, "lists")
    url_cases.write_lists(lists, real, assets)
    stage = UrlFilter(UrlFilterOptions(**{f"url_{name}": os.path.join(lists, file) for name, file in (
        ("blocked_domains", "domains"), ("blocked_urls", "urls"), ("banned_words", "banned_words.txt"),
        ("banned_subwords", "banned_subwords.txt"), ("soft_banned_words", "soft_banned_words.txt"))}))
    stage.setup()
    docs = [Doc("x", "s", 0, i + 1, Line(i + 1, 0, json.dumps({"url": u}).encode())) for i, u in enumerate(urls)]
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(cpu(lambda: stage.apply_many(docs)))
        theirs.append(datatrove_time("url", [{"url": u} for u in urls], folder, "--lists", lists))
    return [("url_filter", len(urls), min(ours), None, min(theirs))]


def rows_hf(texts: list[str], folder: str, size: str, rounds: int, batch: int) -> list[tuple]:
    """Our stage vs the bare length-sorted batched loop (the limit) and the unsorted one."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from pipeline.stages.base import Doc
    from pipeline.stages.hf_classifier import HfClassifier, HfClassifierOptions

    torch.set_num_threads(1)
    path = classifier_models.write_fineweb_edu_like(os.path.join(folder, f"edu-{size}"), texts, size=size)
    stage = HfClassifier(HfClassifierOptions(hf_model=path, hf_batch_size=batch))
    stage.setup()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    docs = [Doc(t, "s", 0, i + 1) for i, t in enumerate(texts)]

    def loop(sort: bool):
        def run():
            ids = tokenizer(texts, truncation=True)["input_ids"]
            order = sorted(range(len(ids)), key=lambda i: len(ids[i])) if sort else list(range(len(ids)))
            with torch.inference_mode():
                for start in range(0, len(order), batch):
                    padded = tokenizer.pad({"input_ids": [ids[i] for i in order[start:start + batch]]},
                                           return_tensors="pt")
                    model(**padded).logits.tolist()
        return run

    stage.apply_many(docs[:2])
    ours, limit, unsorted = [], [], []
    for _ in range(rounds):
        limit.append(cpu(loop(True)))
        ours.append(cpu(lambda: stage.apply_many(docs)))
        unsorted.append(cpu(loop(False)))
    label = f"hf_classifier ({size}, batch {batch})"
    return [(label, len(texts), min(ours), min(limit), None),
            (f"  bare loop without length sorting ({size})", len(texts), min(unsorted), min(limit), None)]


def main() -> None:
    """Run every side, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--real_docs", type=int, default=64)
    ap.add_argument("--skip_real", action="store_true")
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in real_text_corpus.compose(int(args.mb * 1e6), seed=0, shape="kinds")]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        rows += rows_fasttext(texts, folder, args.rounds)
        rows += rows_url(folder, args.rounds)
        rows += rows_hf(texts[:600], folder, "tiny", args.rounds, 32)
        if not args.skip_real:
            rows += rows_hf(texts[:args.real_docs], folder, "real", 1, 16)
    print("| stage | documents | ours: CPU s (docs/s) | limit: CPU s (docs/s) | ours / limit | datatrove: CPU s "
          "(docs/s) | ours vs datatrove |")
    print("|---|---|---|---|---|---|---|")
    def rate(seconds: float) -> str:
        per = n / seconds
        return f"{seconds:.2f} ({per:,.0f})" if per >= 10 else f"{seconds:.2f} ({per:.2f})"

    for name, n, ours, limit, theirs in rows:
        lim = "-" if limit is None else rate(limit)
        ratio = "-" if limit is None else f"{ours / limit:.2f}x"
        dt = "-" if theirs is None else rate(theirs)
        speed = "-" if theirs is None else f"{theirs / ours:.1f}x faster"
        print(f"| {name} | {n:,} | {rate(ours)} | {lim} | {ratio} | {dt} | {speed} |")


if __name__ == "__main__":
    main()
