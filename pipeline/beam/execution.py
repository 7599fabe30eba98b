"""How a job spreads over the machine: fan-out of chunks, tokenizer threads, files per worker.

None of this changes a byte of the output (chunk boundaries and record order come from the input
and the config alone), so it is kept out of the config and the manifest.

Why it matters on DirectRunner: its workers are separate processes and every element that crosses
a stage boundary goes through the driver process, one stage after another. Fanning chunks out costs
a full pass of the decompressed text through the driver before any tokenizing starts; with enough
files per worker, handing each worker whole files instead (balanced by size) lets each one stream
read -> tokenize -> pack in one fused stage. Distributed runners (Dataflow, Flink, Spark) always fan
out: their worker count changes at run time and a few unsplittable 14 GB files would cap parallelism.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import fsspec

from pipeline.config.job import FAN_OUT_CHOICES

LOG = logging.getLogger(__name__)
# Without the fan-out, each worker gets whole files: enough of them per worker keeps the load even.
FILES_PER_WORKER_WITHOUT_FAN_OUT = 2


@dataclasses.dataclass(frozen=True)
class Execution:
    """How one job runs.

    fan_out: shuffle chunks to workers; workers: slots files are balanced over when not fanning out;
    encode_threads: threads per tokenizer batch (None: the library's default, all cores);
    spill: records cross the shuffle as local files (all workers on this machine, pipeline/io/spill.py);
    spill_dir: where, once the job has made it;
    progress: where workers send their progress (pipeline/beam/progress.py), None: metrics only;
    input_bytes: the inputs' stored size, the 100% of progress.
    """

    fan_out: bool = True
    workers: int = 1
    encode_threads: int | None = None
    spill: bool = False
    spill_dir: str | None = None
    progress: tuple[str, int] | None = None
    input_bytes: int = 0


def plan_execution(runner: str, direct_workers: int | None, input_files: list[str], fan_out: str = "auto",
                   encode_threads: int | None = None) -> Execution:
    """Decide fan-out and tokenizer threads for `runner`; the choice is logged."""
    if fan_out not in FAN_OUT_CHOICES:
        raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}, got {fan_out!r}")
    direct = runner in ("DirectRunner", "direct")
    # --direct_num_workers 0 means one per core (as in Beam's FnApiRunner).
    workers = (direct_workers if direct_workers != 0 else os.cpu_count() or 1) if direct else 1
    workers = max(1, workers or 1)
    if encode_threads is None:
        # One worker process per core wants one thread each; fewer workers share out the cores.
        # Distributed runners start one SDK process per vCPU (Dataflow's default), hence 1.
        encode_threads = max(1, (os.cpu_count() or 1) // workers) if direct else 1
    if fan_out == "auto":
        chosen = not direct or len(input_files) < FILES_PER_WORKER_WITHOUT_FAN_OUT * workers
    else:
        chosen = fan_out == "yes"
    if not chosen and not direct:
        LOG.warning("--fan_out no on %s: each input file is read and tokenized by one worker", runner)
    LOG.info("execution: %s, %d tokenizer thread(s) per worker%s", "chunks fanned out to workers" if chosen else
             f"whole files on {workers} worker(s), balanced by size", encode_threads,
             ", records to the shard writers through local spill files" if direct else "")
    return Execution(fan_out=chosen, workers=workers, encode_threads=encode_threads, spill=direct)


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


def balance(sizes: list[int], slots: int) -> list[int]:
    """Slot of each file: biggest first onto the least-loaded slot (LPT), ties by index: deterministic."""
    loads = [0] * max(1, slots)
    slot_of = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        slot = min(range(len(loads)), key=lambda s: (loads[s], s))
        slot_of[i] = slot
        loads[slot] += sizes[i]
    return slot_of
