"""Work items, for the runners whose workers read their own inputs (DirectRunner's workers, Dask's tasks).

A fan-out (Dataflow, Flink, Spark) sends every chunk through a shuffle, so any worker tokenizes any
chunk. Where that costs more than it gives, each worker reads its own work items and streams read
-> tokenize -> pack in one fused stage: on DirectRunner every element that crosses a stage boundary
goes through the driver process, and on Dask a task's output is a list in memory. An item is a
whole file, a frame of an indexed input, a row group, a stripe of a big file (every n-th chunk,
pipeline/io/frames.py `Stripe`), or one a run before finished (`Done`, pipeline/beam/read.py),
chosen from measured costs by `share_files`: whole files when they balance over the workers,
stripes of the big ones when they do not (one file, two files of unequal size, three files on two
workers). Shared by the direct and dask profiles.
"""

from __future__ import annotations

import logging

from pipeline.beam.execution import file_sizes
from pipeline.io import columnar
from pipeline.io.frames import Stripe
from pipeline.io.urls import name_part, redact_url
from pipeline.process.commit import Done

LOG = logging.getLogger(__name__)
# Reading a byte of a .zst file (decompress, split lines) against everything done with it: a small
# share, smaller with SentencePiece than with the fast engines (scripts/bench/bench_pipeline.py's
# per-stage table). Every worker sharing a file reads all of it, so this is what a stripe costs
# beyond its share.
READ_SHARE = {"sentencepiece": 0.01}
READ_SHARE_FAST = 0.05  # the fast backends
BALANCED = 1.02  # a plan within 2% of a perfect split is not improved further
# Text of a compressed input against its stored size, a guess for sizing groups of queued work items
# (pipeline/beam/runners/direct/read.py `queue_groups`) only: a wrong one costs speed, never a byte.
# zstd and gzip give 2-4.5x on text.
COMPRESSED_GUESS = 3.0
COMPRESSED_SUFFIXES = (".zst", ".zstd", ".gz", ".parquet", ".arrow")
# Taking a finished work item's results back from the work folder (a resumed run, pipeline/process/commit.py)
# against processing it: reading its results back costs about what reading its input does.
DONE_SHARE = 0.02


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


def stripes_apart(units: list[tuple]) -> list:
    """The `apart` keys of `balance` for work items: a stripe's file index (its stripes on different workers)."""
    return [u[0] if isinstance(u[2], Stripe) else None for u in units]


def work_items(job, files: list[tuple[int, str]], frames_of: dict,
               board: str | None = None) -> tuple[list[tuple], list[float]]:
    """Work items of a job whose workers read their own ((file_index, path, Frame | Stripe | None)), and their costs.

    With a `board` (DirectRunner's workers are threads of this process) the other items go on a
    queue the workers take them from and the largest whole file is shared by every worker, its
    chunks claimed as the workers get free (pipeline/beam/runners/direct/claims.py), last: whatever
    the estimates got wrong, the workers finish together.
    """
    sizes = file_sizes([path for _, path in files])
    indexed = {i for i, _ in files if frames_of[i] != [None]}
    read_share = READ_SHARE.get(job.tokenizer.backend.name, READ_SHARE_FAST)
    # Only a JSON-lines file is read in stripes (every n-th chunk): an Arrow file is read whole, by one worker.
    whole = [j for j, (i, path) in enumerate(files) if i not in indexed and not columnar.is_columnar(path)]
    stripes = dict.fromkeys(range(len(files)), 1)
    workers = job.execution.workers
    if job.execution.share and board and workers > 1 and whole:
        stripes[max(whole, key=lambda j: (sizes[j], -j))] = workers
    elif job.execution.share:
        stripes.update(zip(whole, share_files([sizes[j] for j in whole], workers, read_share), strict=True))
    units, costs = [], []
    for j, (i, path) in enumerate(files):
        if i in indexed:
            weights = [(unit.size or 1) * (DONE_SHARE if isinstance(unit, Done) else 1) for unit in frames_of[i]]
            total = sum((unit.size or 1) for unit in frames_of[i])
            units += [(i, path, unit) for unit in frames_of[i]]
            costs += [sizes[j] * w / total for w in weights]
        elif stripes[j] == 1:
            units.append((i, path, None))
            costs.append(sizes[j] * (1 + read_share))
        else:
            units += [(i, path, Stripe(k, stripes[j], board)) for k in range(stripes[j])]
            costs += [sizes[j] * (read_share + 1 / stripes[j])] * stripes[j]
    shared = {files[j][1]: k for j, k in stripes.items() if k > 1}
    if shared:
        LOG.info("files read in stripes by several workers%s: %s",
                 " (each chunk tokenized by the first worker free to claim it)" if board else "",
                 ", ".join(f"{redact_url(path)} ({k})" for path, k in sorted(shared.items())))
    return units, costs
