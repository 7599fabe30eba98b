"""Run the token-shard job on Beam, from a checked configuration: `pile-pipeline run` after its flags.

Fail fast, before any worker starts (inputs, tokenizer, output directory, whether the workers can
read the paths); take the output directory's lock; plan the execution; check the tokenizer backend;
run the pipeline; print the summary from the manifest it wrote.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PortableOptions, StandardOptions, TestOptions

from pipeline.beam.execution import file_sizes, plan_execution, running_mode
from pipeline.beam.job import build_pipeline, resolve_job
from pipeline.beam.logs import JobFailed, failure_line
from pipeline.beam.options import direct_runner, pipeline_options, running_mode_given
from pipeline.beam.progress import Monitor
from pipeline.beam.remote import check_workers_can_read, workers_of
from pipeline.config.job import PipelineConfig
from pipeline.core import gc_policy
from pipeline.core.options import UsageError
from pipeline.format import megatron
from pipeline.format.manifest import load_manifest
from pipeline.format.summary import format_summary
from pipeline.io.inputs import expand_inputs
from pipeline.io.layout_check import check_layout
from pipeline.io.lock import OutputLock
from pipeline.io.outputs import new_run_id, prepare_output_dir, remove_unfinished_run
from pipeline.io.signals import caught_signal
from pipeline.io.snapshot import take_snapshots
from pipeline.io.spill import make_spill_dir, remove_spill_dir
from pipeline.io.urls import redact_url, refuse_credentials
from pipeline.tokenize.model import load_processor, resolve_special_ids
from pipeline.tokenize.self_check import EarlyChoice

LOG = logging.getLogger("pipeline")


def run_job(config: PipelineConfig, beam_args: list[str], early: EarlyChoice | None = None) -> dict | None:
    """Run the job; returns the manifest it wrote (None when the job was only translated).

    With `--dry_run True` (DataflowRunner) or `--output_executable_path` (Flink/Spark jar) the job
    is translated but not run here: the output directory is left untouched (dry run) or checked
    and prepared (jar), and there is no manifest to return. `early`: the backend self-check, if the
    command started it already (its result is used only where it matches what is decided here; the
    command stops it).
    """
    paths = [("--input", u) for u in config.inputs] + [("--output_dir", config.output_dir),
                                                         ("--tokenizer_model", config.tokenizer_model)]
    refuse_credentials(paths)
    options = pipeline_options(beam_args)
    dry_run = bool(options.view_as(TestOptions).dry_run)
    executable = options.view_as(PortableOptions).output_executable_path
    try:
        check_workers_can_read(options, paths)
    except UsageError as e:
        if not dry_run:
            raise
        LOG.warning("%s (a dry run only translates the job here; a real run stops on this)", e)
    # Fail fast, before any worker starts: inputs, tokenizer and output directory.
    input_files = expand_inputs(list(config.inputs))
    check_layout(config.schema, input_files, config.max_line_bytes)
    try:
        sp = load_processor(config.tokenizer_model)
    except FileNotFoundError:
        raise UsageError(f"--tokenizer_model: no such file {redact_url(config.tokenizer_model)}") from None
    special = resolve_special_ids(
        sp, add_bos=config.add_bos, add_eos=config.add_eos, bos_id=config.bos_id, eos_id=config.eos_id
    )
    run_id = new_run_id()
    # One writer per output directory, from before anything is removed there until the job ends
    # (a translated job runs elsewhere, later: nothing to hold).
    lock = None if dry_run or executable else OutputLock.acquire(config.output_dir, run_id, config.overwrite)
    try:
        if not dry_run:
            prepare_output_dir(config.output_dir, config.overwrite)
        runner = options.view_as(StandardOptions).runner
        execution = plan_execution(runner, options.view_as(DirectOptions).direct_num_workers, input_files,
                                   config.fan_out, config.tokenizer_threads)
        if execution.spill and not (dry_run or executable):
            execution = dataclasses.replace(execution, spill_dir=make_spill_dir(config.output_dir))
        # Workers on this machine report progress to the driver; elsewhere it is in the runner's metrics.
        input_bytes = sum(file_sizes(input_files))
        monitor = Monitor(input_bytes, config.progress_every if workers_of(options).local else 0).start()
        try:
            execution = dataclasses.replace(execution, progress=monitor.address, input_bytes=input_bytes,
                                            snapshots=take_snapshots(input_files))
            backend = early.result(config.tokenizer_backend, config.tokenizer_model, input_files,
                                   config.schema) if early is not None else None
            job = resolve_job(config, input_files, special, execution, run_id, backend)
            if runner == "DirectRunner" and not running_mode_given(beam_args):
                mode = running_mode(execution.workers, job.backend.name)
                options.view_as(DirectOptions).direct_running_mode = mode
                LOG.info("execution: %d DirectRunner worker %s", execution.workers,
                         "threads in this process" if mode == "multi_threading" else "processes")
            LOG.info("%d input files -> %s (runner %s, run %s)", len(input_files), redact_url(config.output_dir),
                     runner, run_id)
            start = time.monotonic()
            with beam.Pipeline(runner=direct_runner(options), options=options) as p:
                build_pipeline(p, job)
                gc_policy.resume()  # the job's own objects are collected as usual
        except Exception as e:
            line = failure_line(e)
            if line is None:
                raise
            raise JobFailed(line) from e
        finally:
            monitor.stop()
            remove_spill_dir(execution.spill_dir)
    except BaseException:
        if caught_signal() and lock is not None:  # stopped: what this run wrote goes (nobody else writes there)
            remove_unfinished_run(config.output_dir, run_id)
        raise
    finally:
        if lock is not None:
            lock.release()
    if dry_run or executable:
        LOG.info("%s: the job was translated for %s, not run%s", "dry run" if dry_run else "jar",
                 runner, f"; wrote {executable}" if executable else "")
        return None
    if config.output_format == "megatron":
        manifest = megatron.load_manifest(config.output_dir)
        print(megatron.format_summary(manifest, time.monotonic() - start, megatron.prefix_root(config.output_dir)))
        return manifest
    manifest = load_manifest(config.output_dir)
    print(format_summary(manifest, time.monotonic() - start, output_dir=redact_url(config.output_dir)))
    return manifest
