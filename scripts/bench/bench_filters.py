"""The cleaning stages' speed: the four quality filters, ours against datatrove's, and language id.

    python scripts/bench/bench_filters.py [--mb 6] [--shape kinds] [--datatrove .venv-datatrove/bin/python]
        [--job MODEL]

One run, side by side, on the same documents (real_text_corpus.py's corpus, built in memory):
  - datatrove 0.10.1's GopherQuality, GopherRepetition, C4Quality and FineWebQuality filters chained as
    a datatrove pipeline runs them (scripts/bench/datatrove_filters.py --time, in its own
    environment), CPU seconds of its one process;
  - ours (the same four, in the same order, each on the text the one before left), CPU seconds of
    this process, with a cold chunk table (a worker's first documents);
  - both keep the same number of documents (the tests check each decision);
  - language id (lid.176.ftz) on the same documents: documents/s and the resident memory it adds;
  - with --job MODEL: `pile-pipeline run --tokenizer_backend auto` on the corpus three times (no stage;
    the four filters; the four and --languages en) on the default workers, and the CPU seconds of
    each (the command and its worker processes): the stages' share of a cleaning run.
Both sides run on one core (one process each; taskset pins both to the same CPU when available).
The last line printed is `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from pipeline.stages.base import Doc, Keep, Remove  # noqa: E402
from pipeline.stages.c4_quality import C4Quality  # noqa: E402
from pipeline.stages.fineweb_quality import FineWebQuality  # noqa: E402
from pipeline.stages.gopher_quality import GopherQuality  # noqa: E402
from pipeline.stages.gopher_repetition import GopherRepetition  # noqa: E402
from pipeline.stages.language import LanguageIdentifier  # noqa: E402
from pipeline.stages.words import thread_words  # noqa: E402


def corpus(mb: float, shape: str) -> list[str]:
    """The texts of real_text_corpus.py's corpus of about `mb` MB."""
    spec = importlib.util.spec_from_file_location("real_text_corpus", os.path.join(HERE, "real_text_corpus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [json.loads(line)["text"] for line in module.compose(int(mb * 1e6), seed=0, shape=shape)]


def ours(texts: list[str]) -> dict:
    """The four stages in order, as the job applies them, on one core: CPU seconds (spaCy loaded first)."""
    stages = [GopherQuality(), GopherRepetition(), C4Quality(), FineWebQuality()]
    for stage in stages:
        stage.setup()
    thread_words()
    start = time.process_time()
    kept = 0
    for i, text in enumerate(texts):
        for stage in stages:
            verdict = stage.apply(Doc(text, "x", 0, i + 1))
            if isinstance(verdict, Remove):
                break
            if isinstance(verdict, Keep) and verdict.text is not None:
                text = verdict.text
        else:
            kept += 1
    return {"seconds": time.process_time() - start, "kept": kept}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def language(texts: list[str]) -> dict:
    """lid.176 on every text: CPU seconds and the memory the model adds."""
    before = rss_mb()
    ident = LanguageIdentifier()
    ident.identify(texts[0])
    start = time.process_time()
    for text in texts:
        ident.identify(text)
    return {"seconds": time.process_time() - start, "model_mb": rss_mb() - before}


def datatrove(texts: list[str], python: str, cpu: str | None) -> dict:
    """datatrove_filters.py --time on the texts, in its environment."""
    with tempfile.TemporaryDirectory() as tmp:
        docs = os.path.join(tmp, "docs.jsonl")
        with open(docs, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        command = [python, os.path.join(HERE, "datatrove_filters.py"), docs, os.path.join(tmp, "out.json"), "--time"]
        if cpu is not None:
            command = ["taskset", "-c", cpu, *command]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1].removeprefix("TIME "))


def job_cpu(texts: list[str], model: str) -> dict:
    """CPU seconds of `pile-pipeline run` on the texts: no stage, the four filters, and --languages too."""
    import resource

    runs = {"no stage": [], "4 filters": ["--filters", "gopher_quality,gopher_repetition,c4_quality,fineweb_quality"]}
    runs["4 filters + language"] = runs["4 filters"] + ["--languages", "en"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "docs.jsonl"), "w") as f:
            f.writelines(json.dumps({"text": t, "meta": {"pile_set_name": "Pile-CC"}}) + "\n" for t in texts)
        for name, flags in runs.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-m", "pipeline.cli.main", "run",
                            "--input", os.path.join(tmp, "docs.jsonl"),
                            "--output_dir", os.path.join(tmp, name.replace(" ", "_")),
                            "--tokenizer_model", model, "--tokenizer_backend", "auto", *flags],
                           check=True, capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[name] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return out


def main() -> None:
    """Run both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=6.0)
    parser.add_argument("--shape", default="kinds")
    parser.add_argument("--datatrove", default=os.path.join(REPO, ".venv-datatrove", "bin", "python"))
    parser.add_argument("--job", metavar="MODEL", help="also time whole jobs with this tokenizer model")
    args = parser.parse_args()
    texts = corpus(args.mb, args.shape)
    chars = sum(map(len, texts))
    cpu = None
    if hasattr(os, "sched_setaffinity"):
        cpu = str(min(os.sched_getaffinity(0)))
        os.sched_setaffinity(0, {int(cpu)})
    theirs = datatrove(texts, args.datatrove, cpu)
    mine = ours(texts)
    lang = language(texts)
    n = len(texts)
    result = {"docs": n, "mb": round(chars / 1e6, 2), "datatrove_s": round(theirs["seconds"], 2),
              "ours_s": round(mine["seconds"], 2), "speedup": round(theirs["seconds"] / mine["seconds"], 2),
              "kept_datatrove": theirs["kept"], "kept_ours": mine["kept"],
              "language_docs_per_s": round(n / lang["seconds"]), "language_model_mb": round(lang["model_mb"], 1)}
    print(f"{n:,} documents, {chars / 1e6:.1f} M characters ({args.shape})")
    print("| the four quality filters, one core | CPU s | documents/s | kept |")
    print("|---|---|---|---|")
    print(f"| datatrove 0.10.1 | {theirs['seconds']:.2f} | {n / theirs['seconds']:,.0f} | {theirs['kept']} |")
    print(f"| ours | {mine['seconds']:.2f} | {n / mine['seconds']:,.0f} | {mine['kept']} |")
    print(f"speed-up {result['speedup']}x; language id {result['language_docs_per_s']:,} documents/s, "
          f"model {result['language_model_mb']} MB")
    if args.job:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        cpu_s = job_cpu(texts, args.job)
        base = cpu_s["no stage"]
        for name, seconds in cpu_s.items():
            print(f"job CPU s, {name}: {seconds:.1f}" + (f" (the stages: {100 * (seconds - base) / seconds:.0f}%)"
                                                         if seconds > base else ""))
        result["job_cpu_s"] = {k: round(v, 1) for k, v in cpu_s.items()}
    if theirs["kept"] != mine["kept"]:
        raise SystemExit(f"the two keep different documents: {theirs['kept']} vs {mine['kept']}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
