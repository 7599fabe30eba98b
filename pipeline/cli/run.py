"""`pile-pipeline run` (or `python -m pipeline.run`): JSON-lines files -> token shards + manifest.

    pile-pipeline run --input 'train/*.jsonl.zst' --output_dir out --tokenizer_model m.model

Any other JSON-lines corpus: say where each line keeps its text and subset name, e.g.

    pile-pipeline run --input 'data/*.jsonl' --output_dir out --tokenizer_model m.model \
        --text_key body --subset_key source.name --subset_names any --default_subset other

Our flags are declared on `PipelineConfig` (pipeline/config/job.py); every other flag must be one
of Beam's (`--runner`, `--direct_num_workers`, `--project`, ...). `--config FILE` reads a TOML file
(see beam_configs/) whose [pipeline] and [beam] tables come before the command line.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PortableOptions, StandardOptions, TestOptions

from pipeline.beam.execution import file_sizes, plan_execution, running_mode
from pipeline.beam.job import build_pipeline, resolve_job
from pipeline.beam.logs import JobFailed, configure_logging, failure_line
from pipeline.beam.options import BEAM, pipeline_options, running_mode_given
from pipeline.beam.progress import Monitor
from pipeline.beam.remote import check_workers_can_read, workers_of
from pipeline.config.job import PipelineConfig
from pipeline.core.options import ArgumentParser, UsageError, add_options, parse_command_line, values_from
from pipeline.format import megatron
from pipeline.format.manifest import ManifestError, load_manifest
from pipeline.format.summary import format_summary
from pipeline.io.inputs import expand_inputs
from pipeline.io.lock import OutputLock
from pipeline.io.outputs import new_run_id, prepare_output_dir
from pipeline.io.scratch import private_temp_dir
from pipeline.io.spill import make_spill_dir, remove_spill_dir
from pipeline.io.urls import redact_url, refuse_credentials
from pipeline.tokenize.model import load_processor, resolve_special_ids

LOG = logging.getLogger("pipeline")


def build_parser() -> ArgumentParser:
    """Our flags, from PipelineConfig (Beam's are checked by `parse_command_line`)."""
    parser = ArgumentParser(prog="pile-pipeline run", description=__doc__)
    parser.add_argument("--config", metavar="FILE", help="TOML file with [pipeline] and [beam] tables (beam_configs/)")
    add_options(parser, PipelineConfig)
    return parser


def parse_args(argv: list[str]) -> tuple[PipelineConfig, list[str]]:
    """Our config and Beam's flags; any mistake is a UsageError naming the flag."""
    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    try:
        return PipelineConfig(**values_from(PipelineConfig, namespace)), beam_args
    except ValueError as e:
        raise UsageError(str(e)) from None


def main(argv: list[str] | None = None) -> dict | None:
    """Run the pipeline; returns the manifest it wrote (None when the job was only translated).

    With `--dry_run True` (DataflowRunner) or `--output_executable_path` (Flink/Spark jar) the job
    is translated but not run here: the output directory is left untouched (dry run) or checked
    and prepared (jar), and there is no manifest to return.
    """
    argv = sys.argv[1:] if argv is None else argv
    config, beam_args = parse_args(argv)
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
            execution = dataclasses.replace(execution, progress=monitor.address, input_bytes=input_bytes)
            job = resolve_job(config, input_files, special, execution, run_id)
            if runner == "DirectRunner" and not running_mode_given(beam_args):
                mode = running_mode(execution.workers, job.backend.name)
                options.view_as(DirectOptions).direct_running_mode = mode
                LOG.info("execution: %d DirectRunner worker %s", execution.workers,
                         "threads in this process" if mode == "multi_threading" else "processes")
            LOG.info("%d input files -> %s (runner %s, run %s)", len(input_files), redact_url(config.output_dir),
                     runner, run_id)
            start = time.monotonic()
            with beam.Pipeline(options=options) as p:
                build_pipeline(p, job)
        except Exception as e:
            line = failure_line(e)
            if line is None:
                raise
            raise JobFailed(line) from e
        finally:
            monitor.stop()
            remove_spill_dir(execution.spill_dir)
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


def cli(argv: list[str] | None = None) -> int:
    """The command: exit status 0, 2 or 1, and one line for every failure of ours.

    2: a mistake found before the job starts (the command, its inputs, the output directory, a store
    out of reach). 1: the job failed on a damaged input, a full disk or an output it refuses to publish.
    """
    configure_logging()
    try:
        with private_temp_dir():
            main(argv)
    except JobFailed as e:
        LOG.error("%s", e)
        return 1
    except (ValueError, OSError, ManifestError) as e:
        LOG.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
