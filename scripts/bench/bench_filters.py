"""The cleaning stages' speed: the four quality filters, ours against datatrove's, and language id.

    python scripts/bench/bench_filters.py [--mb 6] [--shape kinds] [--rounds 2]
        [--datatrove .venv-datatrove/bin/python] [--job MODEL]

One run, side by side, on the same documents (real_text_corpus.py's corpus, built in memory),
--rounds times (datatrove, then ours, then language id, in each round):
  - datatrove 0.10.1's GopherQuality, GopherRepetition, C4Quality and FineWebQuality filters chained as
    a datatrove pipeline runs them (scripts/bench/datatrove_filters.py --time, in its own
    environment), CPU and wall seconds of its one process, spaCy loaded before the clock starts;
  - ours (the same four, in the same order, each on the text the one before left), CPU and wall
    seconds of this process, with a cold chunk table (a worker's first documents), and the peak
    memory the stages add (spaCy, the chunk table);
  - both keep the same number of documents (the tests check each decision);
  - language id (lid.176.ftz) on the same documents: documents/s and the resident memory it adds;
  - with --job MODEL: `pile-pipeline run --tokenizer_backend auto` on the corpus four times (no stage;
    the four filters; --languages en; both) on the default workers: CPU seconds of the command
    and its worker processes (the stages' share of a cleaning run), wall seconds, and the peak RSS
    of its largest process (a bound on a worker's memory).
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


class PeakRss:
    """This process's peak resident memory while the block runs, sampled every 20 ms by a thread (MB)."""

    def __enter__(self):
        import threading

        self.start = self.peak = rss_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._done.wait(0.02):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def ours(texts: list[str]) -> dict:
    """The four stages in order, as the job applies them, on one core: CPU and wall seconds, peak memory.

    A fresh SpacyWords (a cold chunk table, as a worker's first documents); spaCy is loaded before
    the clock starts, in the stages' setup as on a worker (datatrove's side is warmed the same way).
    """
    from pipeline.stages.words import spacy_words as words_module

    with PeakRss() as memory:
        words_module._THREAD.__dict__.pop("words", None)
        stages = [GopherQuality(), GopherRepetition(), C4Quality(), FineWebQuality()]
        for stage in stages:
            stage.setup()
        thread_words()
        start, wall = time.process_time(), time.perf_counter()
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
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
    return {"seconds": seconds, "wall": wall, "kept": kept, "rss_mb": memory.peak - memory.start}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def language(texts: list[str]) -> dict:
    """lid.176 on every text: CPU and wall seconds and the memory the model adds."""
    before = rss_mb()
    ident = LanguageIdentifier()
    ident.identify(texts[0])
    start, wall = time.process_time(), time.perf_counter()
    for text in texts:
        ident.identify(text)
    return {"seconds": time.process_time() - start, "wall": time.perf_counter() - wall, "model_mb": rss_mb() - before}


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
    """`pile-pipeline run` on the texts (no stage; the four filters; --languages; both): CPU and wall
    seconds of the command and its worker processes, and the peak RSS of the largest of them (MB)."""
    import resource

    runs = {"no stage": [], "4 filters": ["--filters", "gopher_quality,gopher_repetition,c4_quality,fineweb_quality"]}
    runs["language"] = ["--languages", "en"]
    runs["4 filters + language"] = runs["4 filters"] + ["--languages", "en"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "docs.jsonl"), "w") as f:
            f.writelines(json.dumps({"text": t, "meta": {"pile_set_name": "Pile-CC"}}) + "\n" for t in texts)
        for name, flags in runs.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = time.perf_counter()
            # each run in a process of its own, so that ru_maxrss (the largest descendant) is this run's
            code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
            peak = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "pipeline.cli.main", "run",
                                   "--input", os.path.join(tmp, "docs.jsonl"),
                                   "--output_dir", os.path.join(tmp, name.replace(" ", "_")),
                                   "--tokenizer_model", model, "--tokenizer_backend", "auto", *flags],
                                  check=True, capture_output=True, text=True).stdout
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[name] = {"cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                         "wall_s": time.perf_counter() - wall, "peak_rss_mb": int(peak.split()[-1]) / 1024}
    return out


def main() -> None:
    """Run both sides (--rounds times, alternating) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=6.0)
    parser.add_argument("--shape", default="kinds")
    parser.add_argument("--rounds", type=int, default=2, help="datatrove then ours, this many times in one run")
    parser.add_argument("--datatrove", default=os.path.join(REPO, ".venv-datatrove", "bin", "python"))
    parser.add_argument("--job", metavar="MODEL", help="also time whole jobs with this tokenizer model")
    args = parser.parse_args()
    texts = corpus(args.mb, args.shape)
    chars = sum(map(len, texts))
    n = len(texts)
    cpu = None
    if hasattr(os, "sched_setaffinity"):
        cpu = str(min(os.sched_getaffinity(0)))
        os.sched_setaffinity(0, {int(cpu)})
    print(f"{n:,} documents, {chars / 1e6:.1f} M characters ({args.shape})")
    print("| round | the four quality filters, one core | CPU s | wall s | documents/s (CPU) | kept |")
    print("|---|---|---|---|---|---|")
    rounds = []
    for r in range(1, args.rounds + 1):
        theirs = datatrove(texts, args.datatrove, cpu)
        mine = ours(texts)
        lang = language(texts)
        for name, side in (("datatrove 0.10.1", theirs), ("ours", mine)):
            print(f"| {r} | {name} | {side['seconds']:.2f} | {side['wall']:.2f} | {n / side['seconds']:,.0f} "
                  f"| {side['kept']} |")
        rounds.append({"datatrove_s": round(theirs["seconds"], 2), "datatrove_wall_s": round(theirs["wall"], 2),
                       "ours_s": round(mine["seconds"], 2), "ours_wall_s": round(mine["wall"], 2),
                       "speedup": round(theirs["seconds"] / mine["seconds"], 2),
                       "speedup_wall": round(theirs["wall"] / mine["wall"], 2),
                       "kept_datatrove": theirs["kept"], "kept_ours": mine["kept"],
                       "ours_rss_mb": round(mine["rss_mb"], 1),
                       "language_docs_per_s": round(n / lang["seconds"]),
                       "language_docs_per_s_wall": round(n / lang["wall"]),
                       "language_model_mb": round(lang["model_mb"], 1)})
        if theirs["kept"] != mine["kept"]:
            raise SystemExit(f"the two keep different documents: {theirs['kept']} vs {mine['kept']}")
    for r, row in enumerate(rounds, 1):
        memory = (f"the filters' memory {row['ours_rss_mb']} MB (spaCy and the chunk table); language id model "
                  f"{row['language_model_mb']} MB" if r == 1 else "memory: round 1's (this process has grown)")
        print(f"round {r}: speed-up {row['speedup']}x CPU, {row['speedup_wall']}x wall; language id "
              f"{row['language_docs_per_s']:,} documents/s (CPU); {memory}")
    result = {"docs": n, "mb": round(chars / 1e6, 2), "rounds": rounds}
    if args.job:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        jobs = job_cpu(texts, args.job)
        base, filters = jobs["no stage"]["cpu_s"], jobs["4 filters"]["cpu_s"]
        for name, job in jobs.items():
            print(f"job, {name}: {job['cpu_s']:.1f} CPU s, {job['wall_s']:.1f} wall s, "
                  f"largest process {job['peak_rss_mb']:.0f} MB")
        lang = jobs["language"]["cpu_s"]
        print(f"the four filters: {100 * (filters - base) / filters:.0f}% of the filtered run's CPU s; "
              f"language id: {100 * (lang - base) / lang:.0f}% of the run with --languages alone")
        result["jobs"] = {k: {m: round(v, 1) for m, v in job.items()} for k, job in jobs.items()}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
