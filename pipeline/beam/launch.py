"""Run the token-shard job on Beam, from a checked configuration: `pile-pipeline run` after its flags.

`run_job` = prepare (pipeline/beam/preflight.py: every check before a worker starts, the tokenizer
model read once, the execution plan, the backend) -> take the output directory's lock -> run the
pipeline -> print the summary of the manifest it wrote (the output format's, pipeline/beam/job.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.beam.execution import Workspace, running_mode
from pipeline.beam.job import build_pipeline, output_format
from pipeline.beam.logs import JobFailed, failure_line, quiet_job_error_tracebacks
from pipeline.beam.options import direct_runner, pipeline_options, running_mode_given
from pipeline.beam.preflight import Job, prepare, translated
from pipeline.beam.progress import Monitor
from pipeline.beam.remote import workers_of
from pipeline.config.job import PipelineConfig
from pipeline.core import gc_policy
from pipeline.io.lock import OutputLock
from pipeline.io.outputs import remove_unfinished_run
from pipeline.io.signals import caught_signal
from pipeline.io.spill import make_spill_dir, remove_spill_dir
from pipeline.io.urls import redact_url
from pipeline.tokenize.early_check import EarlyChoice
from pipeline.tokenize.model import TokenizerModel

LOG = logging.getLogger("pipeline")


def run_job(config: PipelineConfig, beam_args: list[str], early: EarlyChoice | None = None,
            model: TokenizerModel | None = None) -> dict | None:
    """Run the job; returns the manifest it wrote (None when the job was only translated).

    With `--dry_run True` (DataflowRunner) or `--output_executable_path` (Flink/Spark jar) the job
    is translated but not run here: the output directory is left untouched (dry run) or checked
    and prepared (jar), and there is no manifest to return. `early`, `model`: the backend
    self-check and the tokenizer model, if the command started and read them (see `prepare`).
    """
    options = pipeline_options(beam_args)
    if early is not None and warms_dedup_kernels(config, options, beam_args):
        # While the driver waits for the self-check (prepare), not in the first worker's setup.
        threading.Thread(target=_warm_dedup_kernels, name="dedup-kernels", daemon=True).start()
    job = prepare(config, options, model, early)
    dry_run, executable = translated(options)
    # One writer per output directory, from before anything is removed there until the job ends
    # (a translated job runs elsewhere, later: nothing to hold).
    lock = None if dry_run or executable else OutputLock.acquire(config.output_dir, job.run_id, config.overwrite)
    removal = None  # a replaced output's files, removed while the job runs
    try:
        if not dry_run:
            removal = output_format(config).prepare(config)
        seconds = run(job, options, beam_args, translate_only=bool(dry_run or executable))
    except BaseException:
        if caught_signal() and lock is not None:  # stopped: what this run wrote goes (nobody else writes there)
            remove_unfinished_run(config.output_dir, job.run_id)
        raise
    finally:
        if removal is not None:
            report_removal(config.output_dir, removal.wait())
        if lock is not None:
            lock.release()
    if dry_run or executable:
        LOG.info("%s: the job was translated for %s, not run%s", "dry run" if dry_run else "jar",
                 options.view_as(StandardOptions).runner, f"; wrote {executable}" if executable else "")
        return None
    manifest, summary = output_format(config).summary(config, seconds)
    print(summary)
    return manifest


def report_removal(output_dir: str, failed: list[str]) -> None:
    """One warning line for the files of a replaced output that --overwrite could not remove.

    The new output never lists them (they are in the old run's directory); the next --overwrite
    removes them again.
    """
    if failed:
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        LOG.warning("--overwrite: %d file(s) of the previous output in %s could not be removed (%s%s); the new "
                    "output does not use them: remove them by hand or with the next --overwrite", len(failed),
                    redact_url(output_dir), "; ".join(failed[:5]), more)


def warms_dedup_kernels(config: PipelineConfig, options: PipelineOptions, beam_args: list[str]) -> bool:
    """Whether the driver should load dedup's compiled kernels itself: --dedup in DirectRunner's worker threads.

    The threads sign in this process, and their first signature would otherwise wait, in both
    threads, for numba's import and kernels at the start of the read stage.
    """
    if config.dedup not in ("exact", "near") or options.view_as(StandardOptions).runner != "DirectRunner":
        return False
    direct = options.view_as(DirectOptions)
    if running_mode_given(beam_args):
        return direct.direct_running_mode in ("multi_threading", "in_memory")
    # The mode `run` will pick; a backend not settled yet (auto) counts as a fast one.
    return running_mode(direct.direct_num_workers or os.cpu_count() or 1,
                        config.tokenizer_backend or "") == "multi_threading"


def _warm_dedup_kernels() -> None:
    from pipeline.core import minhash_kernel  # numba loads only in a process that signs

    minhash_kernel.warm_up()


def run(job: Job, options: PipelineOptions, beam_args: list[str], translate_only: bool = False) -> float:
    """Run (or translate) the Job's pipeline in its workspace (spill directory, progress); its seconds."""
    config, execution = job.config, job.execution
    runner = options.view_as(StandardOptions).runner
    spill_dir = make_spill_dir(config.output_dir) if execution.spill and not translate_only else None
    # Workers on this machine report progress to the driver; elsewhere it is in the runner's metrics.
    monitor = Monitor(execution.input_bytes, config.progress_every if workers_of(options).local else 0).start()
    try:
        if runner == "DirectRunner" and not running_mode_given(beam_args):
            mode = running_mode(execution.workers, job.tokenizer.backend.name)
            options.view_as(DirectOptions).direct_running_mode = mode
            LOG.info("execution: %d DirectRunner worker %s", execution.workers,
                     "threads in this process" if mode == "multi_threading" else "processes")
        LOG.info("%d input files -> %s (runner %s, run %s)", len(job.input_files), redact_url(config.output_dir),
                 runner, job.run_id)
        start = time.monotonic()
        threads = runner == "DirectRunner" and options.view_as(DirectOptions).direct_running_mode in (
            "multi_threading", "in_memory")
        with quiet_job_error_tracebacks(), beam.Pipeline(runner=direct_runner(options), options=options) as p:
            build_pipeline(p, job, Workspace(spill_dir, monitor.address, job.run_id if threads else None))
            gc_policy.resume()  # the job's own objects are collected as usual
    except Exception as e:
        line = failure_line(e)
        if line is None:
            raise
        raise JobFailed(line) from e
    finally:
        monitor.stop()
        remove_spill_dir(spill_dir)
    return time.monotonic() - start
