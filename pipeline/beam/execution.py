"""How a job spreads over the machine: which worker reads what, tokenizer threads.

None of this changes a byte of the output (chunk boundaries and record order come from the input
and the config alone), so it is kept out of the config and the manifest.

Distributed runners (Dataflow, Flink, Spark) fan chunks out through a shuffle: their worker count
changes at run time and a few unsplittable 14 GB files would cap parallelism. On DirectRunner every
element that crosses a stage boundary goes through the driver process, so a fan-out there costs a
full pass of the decompressed text through the driver before any tokenizing starts. Instead each
worker reads its own work items and streams read -> tokenize -> pack in one fused stage; an item is
a whole file or a stripe of one (every n-th chunk, pipeline/io/frames.py `Stripe`), chosen from
measured costs by `share_files`: whole files when they balance over the workers, stripes of the
big ones when they do not (one file, two files of unequal size, three files on two workers).
"""

from __future__ import annotations

import dataclasses
import logging
import os

import fsspec

from pipeline.beam.graph import EVERY_FEATURE, Runtime
from pipeline.config.job import FAN_OUT_CHOICES
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.urls import name_part

LOG = logging.getLogger(__name__)
# Reading a byte of a .zst file (decompress, split lines) against everything done with it: a small
# share, smaller with SentencePiece than with the fast engines (scripts/bench/bench_pipeline.py's
# per-stage table). Every worker sharing a file reads all of it, so this is what a stripe costs
# beyond its share.
READ_SHARE = {"sentencepiece": 0.01}
READ_SHARE_FAST = 0.05  # the fast backends
BALANCED = 1.02  # a plan within 2% of a perfect split is not improved further
# Decompressed bytes of chunks a DirectRunner worker tokenizes in one call, with an engine that gains
# from it (pipeline/tokenize/engines.py BATCHED). gigatoken starts every call with an empty word
# cache, so fewer, larger calls cost less CPU per token; beyond this size the kernel's mapping of
# the larger buffers takes back what the tokenizer saves (docs/benchmarks.md). Distributed runners
# tokenize a chunk per call: an SDK process runs up to 12 worker threads, each of which would hold a batch.
ENCODE_BATCH_BYTES = 32 << 20
# Text of a compressed input against its stored size, a guess for sizing groups of queued work items
# (`queue_groups`) only: a wrong one costs speed, never a byte. zstd and gzip give 2-4.5x on text.
COMPRESSED_GUESS = 3.0
COMPRESSED_SUFFIXES = (".zst", ".zstd", ".gz", ".parquet", ".arrow")


@dataclasses.dataclass(frozen=True)
class Execution:
    """How one job runs.

    fan_out: shuffle chunks to workers; workers: slots work items are balanced over when not fanning out;
    share: files may be shared between workers in stripes (`share_files`), else each is read whole;
    encode_threads: threads per tokenizer batch (None: the library's default, all cores);
    encode_batch_bytes: decompressed bytes of chunks tokenized in one call (0: a chunk per call);
    spill: records cross the shuffle as local files (all workers on this machine, pipeline/beam/direct/spill.py);
    input_bytes: the inputs' stored size, the 100% of progress;
    tasks: each of `workers` tasks reads its work items itself and tokenizes what it reads, one chunk
    at a time (Beam's DaskRunner, whose tasks hold their outputs in memory).
    """

    fan_out: bool = True
    workers: int = 1
    share: bool = False
    encode_threads: int | None = None
    encode_batch_bytes: int = 0
    spill: bool = False
    input_bytes: int = 0
    tasks: bool = False


@dataclasses.dataclass(frozen=True)
class Workspace:
    """What a run makes once it holds the output directory's lock, for its workers.

    sink: where record blocks go (pipeline/io/sinks.py): KEEP, they cross the shuffle as they are;
    progress: where workers send their progress (pipeline/beam/progress.py), None: metrics only;
    runtime: what the graph may ask of the runner (pipeline/beam/graph.py);
    reader: how the workers get their work items when they read their own (DirectRunner's:
    pipeline/beam/direct/read.py `WorkItems`); None: fanned out, or Dask's tasks.
    """

    sink: RecordSink = KEEP
    progress: tuple[str, int, bytes] | None = None  # the Monitor's (host, port, key)
    runtime: Runtime = EVERY_FEATURE
    reader: object | None = None


def plan_execution(runner: str, direct_workers: int | None, input_files: list[str], fan_out: str = "auto",
                   encode_threads: int | None = None, input_bytes: int = 0) -> Execution:
    """Decide fan-out and tokenizer threads for `runner`; the choice is logged.

    `input_bytes`: the inputs' stored size (`file_sizes`), for progress.
    """
    if fan_out not in FAN_OUT_CHOICES:
        raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}, got {fan_out!r}")
    if runner == "DaskRunner":
        # A dask task is a list, outputs included, and beam.Reshuffle does nothing there: each task
        # reads its own work items (stripes of a big file, to spread it) and tokenizes them as it reads.
        tasks = max(1, direct_workers or 1)
        LOG.info("execution: %d Dask tasks, each reading its work items (whole files or stripes of them)", tasks)
        return Execution(fan_out=False, workers=tasks, share=True, encode_threads=encode_threads or 1,
                         input_bytes=input_bytes, tasks=True)
    direct = runner in ("DirectRunner", "direct")
    # --direct_num_workers 0 means one per core (as in Beam's FnApiRunner).
    workers = (direct_workers if direct_workers != 0 else os.cpu_count() or 1) if direct else 1
    workers = max(1, workers or 1)
    if encode_threads is None:
        # One worker process per core wants one thread each; fewer workers share out the cores.
        # Distributed runners start one SDK process per vCPU (Dataflow's default), hence 1.
        encode_threads = max(1, (os.cpu_count() or 1) // workers) if direct else 1
    chosen = fan_out == "yes" or (fan_out == "auto" and not direct)
    share = direct and fan_out == "auto"
    if not chosen and not direct:
        LOG.warning("--fan_out no on %s: each input file is read and tokenized by one worker", runner)
    LOG.info("execution: %s, %d tokenizer thread(s) per worker%s", "chunks fanned out to workers" if chosen else
             f"work items on {workers} worker(s): " + ("whole files or stripes of them" if share else "whole files"),
             encode_threads, ", records to the shard writers through local spill files" if direct else "")
    return Execution(fan_out=chosen, workers=workers, encode_threads=encode_threads,
                     encode_batch_bytes=ENCODE_BATCH_BYTES if direct else 0, spill=direct, share=share,
                     input_bytes=input_bytes)


def text_bytes_guess(path: str, stored: float) -> float:
    """The decompressed bytes of `stored` bytes of `path`, guessed from its name (`COMPRESSED_GUESS`)."""
    return stored * COMPRESSED_GUESS if name_part(path).lower().endswith(COMPRESSED_SUFFIXES) else stored


def share_files(sizes: list[int], workers: int, read_share: float) -> list[int]:
    """How many stripes each file is read in (1: whole), for the shortest estimated run.

    A file of size S in k stripes makes k work items of cost S * (read_share + 1 / k): each stripe
    reads the whole file and processes a k-th of it. Items go to workers largest first (`balance`).
    Starting from whole files, the file with the largest item is split once more, up to one stripe
    per worker, keeping the best plan seen (ties: fewer stripes); it stops once a plan is within 2%
    of a perfect split or `workers` splits in a row did not help.

    >>> share_files([100], 2, 0.05), share_files([100, 100], 2, 0.05), share_files([100, 100, 100], 2, 0.05)
    ([2], [1, 1], [2, 1, 1])
    """
    stripes = [1] * len(sizes)
    if workers <= 1 or not sizes:
        return stripes
    ideal = sum(sizes) * (1 + read_share) / workers

    def makespan(plan: list[int]) -> float:
        costs = [size * (read_share + 1 / k) for size, k in zip(sizes, plan, strict=True) for _ in range(k)]
        apart = [j if k > 1 else None for j, k in enumerate(plan) for _ in range(k)]
        loads = [0.0] * workers
        for cost, slot in zip(costs, balance(costs, workers, apart), strict=True):
            loads[slot] += cost
        return max(loads)

    best, best_span = list(stripes), makespan(stripes)
    futile = 0
    while best_span > ideal * BALANCED and futile < workers:
        i = max(range(len(sizes)), key=lambda i: (sizes[i] / stripes[i] if stripes[i] < workers else -1, -i))
        if stripes[i] >= workers:
            break
        stripes[i] += 1
        span = makespan(stripes)
        if span < best_span:
            best, best_span, futile = list(stripes), span, 0
        else:
            futile += 1
    return best


def file_sizes(paths: list[str]) -> list[int]:
    """Byte sizes of the input files (compressed); 1 for any whose size cannot be had."""
    sizes = []
    for path in paths:
        try:
            fs, root = fsspec.core.url_to_fs(path)
            sizes.append(int(fs.size(root) or 1))
        except (OSError, ValueError):
            sizes.append(1)
    return sizes


def balance(sizes: list[float], slots: int, apart: list | None = None) -> list[int]:
    """Slot of each work item by its cost: biggest first onto the least-loaded slot (LPT), ties by index.

    `apart`: a key per item (None: none); items with the same key go to different slots while there
    are slots left (the stripes of one file: a worker reading two of them reads the file twice and
    shares it with nobody).

    >>> balance([10, 10, 10, 6, 6], 2), balance([10, 10, 10, 6, 6], 2, [None, None, None, "f", "f"])
    ([0, 1, 0, 1, 1], [0, 1, 0, 1, 0])
    """
    loads = [0] * max(1, slots)
    slot_of = [0] * len(sizes)
    taken: dict = {}  # key -> slots holding an item with that key
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        key = apart[i] if apart is not None else None
        held = taken.setdefault(key, set()) if key is not None else set()
        free = [s for s in range(len(loads)) if s not in held] or range(len(loads))
        slot = min(free, key=lambda s: (loads[s], s))
        slot_of[i] = slot
        loads[slot] += sizes[i]
        held.add(slot)
    return slot_of
