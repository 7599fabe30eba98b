"""Run the token-shard job on Beam, from a checked configuration: `pile-pipeline run` after its flags.

`run_job` = prepare (pipeline/beam/preflight.py: every check before a worker starts, the tokenizer
model read once, the execution plan, the backend) -> take the output directory's lock -> (with
--resume) check the work of the run it takes up -> prepare the output directory -> run the pipeline,
its work items committed into the work folder (pipeline/beam/resume.py) -> remove the work folder ->
print the summary of the manifest it wrote (the output format's, pipeline/beam/job.py).
What differs between runners is asked of the job's runner profile, picked once from --runner
(pipeline/beam/runners/): its warm-up, its workspace, its runner object, its failures' line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipeline.beam.job import PER_SUBSET, SPLIT_BY, build_pipeline, output_format
from pipeline.beam.logs import JobFailed, failure_line, quiet_job_error_tracebacks
from pipeline.beam.options import pipeline_options
from pipeline.beam.preflight import Job, prepare, translated
from pipeline.beam.progress import Monitor
from pipeline.beam.resume import check_work, finish_work, log_work
from pipeline.beam.runners.registry import profile_for
from pipeline.config.job import PipelineConfig
from pipeline.io.lock import OutputLock
from pipeline.io.outputs import remove_temp_files
from pipeline.io.signals import caught_signal
from pipeline.io.urls import redact_url
from pipeline.startup.command import graph_built
from pipeline.startup.early_check import EarlyChoice
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
    if early is not None:
        profile_for(options).warm_up(config, options, beam_args)  # while the driver waits for the self-check
    job = prepare(config, options, model, early)
    dry_run, executable = translated(options)
    # One writer per output directory, from before anything is removed there until the job ends
    # (a translated job runs elsewhere, later: nothing to hold).
    lock = None if dry_run or executable else OutputLock.acquire(config.output_dir, job.run_id, config.overwrite,
                                                                 config.resume)
    removal = None  # a replaced output's files, removed while the job runs
    work = None  # where the run commits its work items (pipeline/beam/resume.py)
    try:
        resumable = lock is not None and resumable_format(config)
        found = check_work(job) if resumable else None  # before anything is removed: a refusal changes nothing
        if not dry_run:
            removal = output_format(config).prepare(config)
        if found is not None:
            job, work = found.start(job)
        seconds = run(job, options, beam_args, translate_only=bool(dry_run or executable), work=work)
        if work is not None:
            finish_work(config.output_dir)
    except BaseException:
        if caught_signal() and lock is not None:  # stopped: what this run wrote goes (nobody else writes there)
            output_format(config).remove_stopped(config, job.run_id)
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


def resumable_format(config: PipelineConfig) -> bool:
    """Whether the job's output format commits its work items: one output (--resume refuses the rest)."""
    return output_format(config) not in (PER_SUBSET, SPLIT_BY)


def run(job: Job, options: PipelineOptions, beam_args: list[str], translate_only: bool = False,
        work=None) -> float:
    """Run (or translate) the Job's pipeline in the workspace its runner's profile makes; its seconds.

    `work`: the WorkFolder its workers commit their work items into (None: none).
    """
    config = job.config
    profile = profile_for(options)
    # Workers on this machine report progress to the driver; elsewhere it is in the runner's metrics.
    local = profile.workers(options).local
    monitor = Monitor(job.execution.input_bytes, config.progress_every if local else 0,
                      tokenizes=config.tokenizer_model is not None).start()
    try:
        with profile.workspace(job, options, beam_args, monitor.address, translate_only) as workspace:
            workspace = dataclasses.replace(workspace, work=work)
            LOG.info("%d input files -> %s (runner %s, run %s)", len(job.input_files),
                     redact_url(config.output_dir), options.view_as(StandardOptions).runner, job.run_id)
            start = time.monotonic()
            p = beam.Pipeline(runner=profile.runner_object(options), options=options)
            try:
                with quiet_job_error_tracebacks(), p:
                    build_pipeline(p, job, workspace)
                    graph_built()  # the job's own objects are collected as usual (pipeline/startup/)
            finally:
                profile.finish(getattr(p, "result", None), options)
            if work is not None:
                log_work(getattr(p, "result", None))
        if profile.reruns_tasks and not translate_only:
            for rel in remove_temp_files(config.output_dir, job.run_id):
                LOG.info("removed %s, left by a writer that was stopped midway", rel)
    except (Exception, asyncio.CancelledError) as e:
        line = failure_line(e) or profile.failure(e, options)
        if line is None:
            raise
        raise JobFailed(line) from e
    finally:
        monitor.stop()
    return time.monotonic() - start
