"""DirectRunner's profile: one machine, every core, the workers reading their own work items.

On DirectRunner every element that crosses a stage boundary goes through the driver process, so a
fan-out of chunks would cost a full pass of the text through the driver before any tokenizing
starts. Instead (`plan`) each worker reads its own work items, balanced by estimated cost
(pipeline/beam/runners/work_items.py), and streams read -> tokenize -> pack in one fused stage,
tokenizing several chunks per call where the engine gains from it (ENCODE_BATCH_BYTES); the
workers are threads of the driver while the tokenizer leaves room for the Python around it, else
processes (runner.py). Record blocks go to the shard writers through local spill files (spill.py),
so that the driver's memory does not grow with the input; worker threads share one queue of work
items and the chunks of the largest file (read.py, claims.py). Beam runs the job on its FnApiRunner,
never on Prism (runner.py). A bundle is never run twice here: nothing to clear after the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.beam.execution import Execution, Workspace
from pipeline.beam.remote import Workers
from pipeline.beam.runners.base import RunnerProfile
from pipeline.beam.runners.direct.read import WorkItems
from pipeline.beam.runners.direct.runner import fn_api_runner, running_mode, running_mode_given, warm_dedup_kernels
from pipeline.beam.runners.direct.spill import SpillSink, make_spill_dir, remove_spill_dir
from pipeline.config.job import FAN_OUT_CHOICES
from pipeline.io.sinks import KEEP

LOG = logging.getLogger(__name__)
# Decompressed bytes of chunks a worker tokenizes in one call, with an engine that gains from it
# (pipeline/tokenize/engines.py BATCHED). gigatoken starts every call with an empty word cache, so
# fewer, larger calls cost less CPU per token; beyond this size the kernel's mapping of the larger
# buffers takes back what the tokenizer saves (docs/benchmarks.md).
ENCODE_BATCH_BYTES = 32 << 20


class Direct(RunnerProfile):
    """DirectRunner (see the module docstring)."""

    family = "direct"
    name = "DirectRunner"
    reruns_tasks = False

    def normalize(self, options: PipelineOptions, beam_args: list[str]) -> None:
        """Beam's name for it; unless given, a worker process per core (`workspace` may make them threads)."""
        options.view_as(StandardOptions).runner = self.name
        direct = options.view_as(DirectOptions)
        if not running_mode_given(beam_args):
            direct.direct_running_mode = "multi_processing"
        if not any(a.startswith("--direct_num_workers") for a in beam_args):
            direct.direct_num_workers = os.cpu_count() or 1

    def warm_up(self, config, options: PipelineOptions, beam_args: list[str]) -> None:
        """Dedup's compiled kernels, loaded in a thread of the driver where its worker threads will sign."""
        warm_dedup_kernels(config, options, beam_args)

    def workers(self, options: PipelineOptions) -> Workers:
        """Threads or processes of this machine."""
        return Workers(True)

    def plan(self, options: PipelineOptions, input_files: list[str], fan_out: str = "auto",
             encode_threads: int | None = None, input_bytes: int = 0) -> Execution:
        """Work items on --direct_num_workers workers (0: one per core), the cores shared out as tokenizer threads."""
        if fan_out not in FAN_OUT_CHOICES:
            raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}, got {fan_out!r}")
        given = options.view_as(DirectOptions).direct_num_workers
        workers = max(1, (given if given != 0 else os.cpu_count() or 1) or 1)  # 0: one per core, as Beam's
        # One worker process per core wants one thread each; fewer workers share out the cores.
        threads = encode_threads if encode_threads is not None else max(1, (os.cpu_count() or 1) // workers)
        chosen, share = fan_out == "yes", fan_out == "auto"
        LOG.info("execution: %s, %d tokenizer thread(s) per worker, records to the shard writers through local "
                 "spill files", "chunks fanned out to workers" if chosen else f"work items on {workers} worker(s): "
                 + ("whole files or stripes of them" if share else "whole files"), threads)
        return Execution(fan_out=chosen, workers=workers, share=share, encode_threads=threads,
                         encode_batch_bytes=ENCODE_BATCH_BYTES, input_bytes=input_bytes)

    @contextlib.contextmanager
    def workspace(self, job, options: PipelineOptions, beam_args: list[str], progress: tuple | None = None,
                  translate_only: bool = False) -> Iterator[Workspace]:
        """The workers' running mode, the spill directory and its sink, the work-item reader; the spill goes after."""
        execution = job.execution
        direct = options.view_as(DirectOptions)
        if not running_mode_given(beam_args):
            direct.direct_running_mode = running_mode(execution.workers, job.tokenizer.backend.name)
            LOG.info("execution: %d DirectRunner worker %s", execution.workers, "threads in this process"
                     if direct.direct_running_mode == "multi_threading" else "processes")
        threads = direct.direct_running_mode in ("multi_threading", "in_memory")
        spill_dir = None if translate_only else make_spill_dir(job.config.output_dir)
        try:
            yield Workspace(SpillSink(spill_dir) if spill_dir else KEEP, progress, self.runtime,
                            WorkItems(job.run_id if threads else None))
        finally:
            remove_spill_dir(spill_dir)

    def runner_object(self, options: PipelineOptions):
        """Beam's FnApiRunner, made here (runner.py `fn_api_runner`)."""
        return fn_api_runner(options)


PROFILE = Direct()
