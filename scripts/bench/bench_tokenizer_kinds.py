"""A Hugging Face `tokenizer.json` side by side: the bare loop, our job (reference and auto), datatrove, Megatron-LM.

    python scripts/bench/bench_tokenizer_kinds.py [--mb 200] [--vocab 32000] [--workers 2] [--rounds 3]
        [--workdir DIR] [--datatrove_python PY] [--megatron_lm DIR --megatron_python PY]

1. Corpus: scripts/bench/real_text_corpus.py's real text (8 train/*.jsonl.zst files, --mb of JSON
   lines), and, outside any timing, one corpus.jsonl of the same lines for Megatron's tool.
2. Tokenizer: a GPT-NeoX-20B-style byte-level BPE tokenizer.json of --vocab ids trained here on every
   4th document (pipeline/tokenize/bpe_trainer.py), `<|endoftext|>` as EOS (its tokenizer_config.json).
3. Timed, each a whole command in a fresh subprocess, in interleaved rounds (medians reported):
   - bare loop: one process, zstd + json + `tokenizers.Tokenizer.encode` per document (+1 EOS);
   - ours, reference: `pile-pipeline run --output_format megatron --tokenizer_backend tokenizers`,
     --workers DirectRunner workers, in the running mode the job picks for the engine (threads: every
     engine releases the GIL, pipeline/beam/runners/direct/runner.py);
   - ours, auto: the same with `--tokenizer_backend auto` (gigatoken, else tokenizers_batch, behind
     the self-check);
   - datatrove (with --datatrove_python, a venv with `pip install datatrove zstandard`): its JsonlReader and
     DocumentTokenizer over the same files, --workers tasks, its shuffle off (ours keeps input order),
     its pool forked (forkserver's processes are not the command's children: their CPU is not counted);
   - Megatron-LM (with --megatron_lm, a checkout, and --megatron_python, a venv with megatron-core, torch
     and transformers, plus what the checkout's megatron.training imports: six, pydantic, triton):
     `tools/preprocess_data.py --tokenizer-type HuggingFaceTokenizer --append-eod --workers N`.
   A peer without its flag is not run; its command is printed instead.
4. Checks: the auto run's shards equal the reference run's, byte for byte; each peer wrote as many
   tokens as we did, less what our encoding of literal special-token strings in the text as text
   adds (the peers load the tokenizer with its defaults, which make them control ids).
Prints a Markdown table (MB/s of JSON lines, x the bare loop, by wall time and by CPU seconds of the
command's whole process tree) and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile

import real_text_corpus  # scripts/bench/ is on sys.path when run as a script
from baseline import REPO, timed

sys.path.insert(0, REPO)

BARE = r"""
import glob, json, sys, time, zstandard
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[2]); tok.encode_special_tokens = True
docs = tokens = 0
for path in sorted(glob.glob(sys.argv[1])):
    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    for line in data.split(b"\n"):
        if line:
            tokens += len(tok.encode(json.loads(line)["text"], add_special_tokens=False).ids) + 1
            docs += 1
print(json.dumps({"docs": docs, "tokens": tokens}))
"""

DATATROVE = r"""
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
inputs, tokenizer, out, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
LocalPipelineExecutor(pipeline=[JsonlReader(inputs, glob_pattern="*.jsonl.zst", compression="zstd"),
                                DocumentTokenizer(out, tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>",
                                                  shuffle_documents=False)],
                      tasks=workers, workers=workers, logging_dir=out + "-logs", start_method="fork").run()
"""


def shard_digests(out: str) -> dict:
    """{file name: sha256} of the .bin/.idx files of an output (run directory names left out)."""
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in sorted(glob.glob(os.path.join(out, "**", "*.bin"), recursive=True)
                            + glob.glob(os.path.join(out, "**", "*.idx"), recursive=True))}


def prepare(work: str, mb: float, vocab: int) -> tuple[str, str, str, int]:
    """(train glob, corpus.jsonl, tokenizer directory, bytes of JSON lines), made once per work dir."""
    from pipeline.tokenize.bpe_trainer import ENDOFTEXT, PADDING, train_bpe

    train = os.path.join(work, "train")
    corpus = os.path.join(work, "corpus.jsonl")
    tok_dir = os.path.join(work, f"bpe{vocab // 1000}k")
    if not os.path.exists(corpus):
        lines = real_text_corpus.compose(int(mb * 1e6))
        real_text_corpus.write_files(lines, train, 8)
        with open(corpus, "wb") as f:
            f.writelines(line + b"\n" for line in lines)
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        with open(corpus, "rb") as f:
            texts = [json.loads(line)["text"] for k, line in enumerate(f) if k % 4 == 0]
        os.makedirs(tok_dir, exist_ok=True)
        train_bpe(texts, vocab).save(os.path.join(tok_dir, "tokenizer.json"))
    # tokenizer_class: what transformers' AutoTokenizer (Megatron's HuggingFaceTokenizer) needs to load
    # a directory without a model config.json.
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": ENDOFTEXT, "eos_token": ENDOFTEXT,
                   "pad_token": PADDING}, f)
    return os.path.join(train, "*.jsonl.zst"), corpus, tok_dir, os.path.getsize(corpus)


def commands(args, train: str, corpus: str, tok_dir: str, work: str) -> dict[str, list[str] | None]:
    """name -> command line (None: the peer is not set up here)."""
    py = sys.executable
    # DirectRunner's running mode left to the job, as a user runs it (threads or processes by the engine).
    ours = [py, "-m", "pipeline.run", "--input", train, "--tokenizer_model", tok_dir, "--output_format", "megatron",
            "--overwrite", "--progress_every", "0", "--direct_num_workers", str(args.workers)]
    out = {
        "bare loop (tokenizers, 1 process)": [py, "-c", BARE, train, os.path.join(tok_dir, "tokenizer.json")],
        "ours, reference (tokenizers)": [*ours, "--output_dir", os.path.join(work, "out-ref"),
                                         "--tokenizer_backend", "tokenizers"],
        "ours, auto": [*ours, "--output_dir", os.path.join(work, "out-auto"), "--tokenizer_backend", "auto"],
        "datatrove DocumentTokenizer": None,
        "Megatron-LM preprocess_data.py": None,
    }
    if args.datatrove_python:
        # datatrove takes a local tokenizer as the file itself (a directory would be a hub repo id).
        out["datatrove DocumentTokenizer"] = [args.datatrove_python, "-c", DATATROVE, os.path.dirname(train),
                                              os.path.join(tok_dir, "tokenizer.json"),
                                              os.path.join(work, "out-datatrove"), str(args.workers)]
    if args.megatron_lm and args.megatron_python:
        out["Megatron-LM preprocess_data.py"] = [
            args.megatron_python, "-W", "ignore", os.path.join(args.megatron_lm, "tools", "preprocess_data.py"),
            "--input", corpus,
            "--output-prefix", os.path.join(work, "out-megatron", "corpus"), "--tokenizer-type",
            "HuggingFaceTokenizer", "--tokenizer-model", tok_dir, "--append-eod", "--workers", str(args.workers)]
        os.makedirs(os.path.join(work, "out-megatron"), exist_ok=True)
    return out


def cpu_children() -> float:
    """CPU seconds of every waited-for child process so far (a command's whole process tree)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peer_tokens(work: str) -> dict[str, int | None]:
    """Tokens written by each peer (uint16 files: the vocabulary is below 65,536), None where it did not run."""
    def size(pattern: str) -> int | None:
        paths = glob.glob(os.path.join(work, pattern))
        return sum(os.path.getsize(p) for p in paths) // 2 if paths else None

    return {"datatrove": size("out-datatrove/*.ds"), "Megatron-LM": size("out-megatron/*.bin")}


def special_strings_extra(corpus: str, tok_dir: str) -> tuple[int, int]:
    """(extra tokens, documents): what encoding literal special-token strings as text adds to the corpus.

    Ours encodes a `<|endoftext|>` written inside a document as text (`encode_special_tokens`), as
    the reference demands; datatrove and Megatron-LM load the tokenizer with its defaults, which
    turn it into the one control id. So their token counts are ours less this.
    """
    from tokenizers import Tokenizer

    as_text = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    as_text.encode_special_tokens = True
    as_control = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    specials = [t.content for t in as_control.get_added_tokens_decoder().values() if t.special]
    extra = documents = 0
    with open(corpus, "rb") as f:
        for line in f:
            text = json.loads(line)["text"]
            if any(s in text for s in specials):
                more = (len(as_text.encode(text, add_special_tokens=False).ids)
                        - len(as_control.encode(text, add_special_tokens=False).ids))
                extra += more
                documents += more != 0
    return extra, documents


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=200)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workdir", default=None)
    p.add_argument("--datatrove_python", default=None)
    p.add_argument("--megatron_lm", default=None)
    p.add_argument("--megatron_python", default=None)
    args = p.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="bench-kinds-")
    train, corpus, tok_dir, size = prepare(work, args.mb, args.vocab)
    cmds = commands(args, train, corpus, tok_dir, work)
    times: dict[str, list[float]] = {name: [] for name, cmd in cmds.items() if cmd}
    cpus: dict[str, list[float]] = {name: [] for name in times}
    loads = []
    for round_ in range(args.rounds):
        for name in times:
            if name.startswith("datatrove"):
                # datatrove skips the tasks its logging folder records as done: every run starts empty.
                for d in ("out-datatrove", "out-datatrove-logs"):
                    shutil.rmtree(os.path.join(work, d), ignore_errors=True)
            cpu = cpu_children()
            seconds, _, _ = timed(cmds[name])
            times[name].append(seconds)
            cpus[name].append(cpu_children() - cpu)
            loads.append(os.getloadavg()[0])
            print(f"round {round_ + 1}: {name}: {seconds:.1f} s, {cpus[name][-1]:.1f} CPU-s, load {loads[-1]:.1f}",
                  file=sys.stderr, flush=True)
    ref, auto = shard_digests(os.path.join(work, "out-ref")), shard_digests(os.path.join(work, "out-auto"))
    manifest = json.load(open(os.path.join(work, "out-auto", "manifest.json")))
    bare = statistics.median(times["bare loop (tokenizers, 1 process)"])
    bare_cpu = statistics.median(cpus["bare loop (tokenizers, 1 process)"])
    print(f"{size / 1e6:.1f} MB of JSON lines, {args.vocab}-id byte-level BPE tokenizer.json, {args.workers} workers, "
          f"{args.rounds} interleaved rounds, {os.cpu_count()} cores; 1-minute load average "
          f"{min(loads):.1f}-{max(loads):.1f}; auto chose {manifest['tokenizer']['backend']['name']}")
    print("\n| command | seconds (median) | MB/s | x bare loop | CPU-s (median) | x bare loop, per CPU-s |"
          "\n|---|---|---|---|---|---|")
    for name, cmd in cmds.items():
        if cmd is None:
            print(f"| {name} | not run here | | | | |")
            continue
        t, c = statistics.median(times[name]), statistics.median(cpus[name])
        print(f"| {name} | {t:.1f} | {size / 1e6 / t:.2f} | {bare / t:.2f} | {c:.1f} | {bare_cpu / c:.2f} |")
    print(f"\nauto's shards byte-identical to the reference's: {ref == auto and bool(ref)}")
    tokens = manifest["totals"]["tokens"]
    counts = peer_tokens(work)
    extra, documents = special_strings_extra(corpus, tok_dir) if any(counts.values()) else (0, 0)
    for peer, count in counts.items():
        if count is not None:
            same = "the same count" if count == tokens - extra else "DIFFERENT"
            print(f"{peer} wrote {count:,} tokens, ours {tokens:,} of which {extra:,} encode the literal special-token "
                  f"strings of {documents} documents as text (the peers: as control ids): {same}")
    for name, cmd in cmds.items():
        if cmd is None:
            print(f"not run ({name}): see this script's docstring for the flag that runs it")


if __name__ == "__main__":
    main()
