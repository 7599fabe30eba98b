"""Beam's side of the command line: the runner's flags, checked, with our defaults for DirectRunner."""

from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
)

from pipeline.core.extras import install_line
from pipeline.core.options import Runner, UsageError, parse_bool, runner_flag


class JavaRunnerOptions(PipelineOptions):
    """Options of Beam's Java runners (Flink, Spark) that Beam's Python SDK does not declare.

    PortableRunner asks a running job service for its runner's options, but our flag check runs
    before any job service exists; declared here, they pass the check and go to the runner in the
    pipeline options (`--storage_level` becomes the Java option `storageLevel`). Unset, they are left
    out and the runner's defaults apply. beam_configs/flink.toml and spark_emr.toml say why each is set.
    """

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--storage_level", default=None,
            help="Spark: storage level of the RDDs Beam caches (a stage's output read by several steps); "
            "Beam's default MEMORY_ONLY recomputes whatever does not fit in memory")
        parser.add_argument(
            "--execution_mode_for_batch", default=None,
            help="Flink: data exchange of batch jobs, PIPELINED (Beam's default) or BATCH_FORCED (blocking "
            "exchanges through local disk; Beam's advice when a job with branches that join again blocks, FLINK-10672)")


def unknown_flags(flags: list[str]) -> list[str]:
    """The arguments among `flags` that Beam's PipelineOptions does not accept (stray values included)."""
    if is_dask(runner_flag(flags)):
        import_dask_options()
    parsers = []
    # add_extra_args_fn hands over the parser Beam builds from every registered options class.
    # Beam would log the unknown ones as "discarded"; the caller reports them instead.
    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)
    try:
        PipelineOptions(flags).get_all_options(add_extra_args_fn=parsers.append)
    finally:
        beam_log.setLevel(level)
    _, unknown = parsers[0].parse_known_args(flags)
    return unknown


def flag_names() -> set[str]:
    """`--name` of every option Beam knows (for "did you mean" suggestions)."""
    return {f"--{name}" for name in PipelineOptions([]).get_all_options(drop_default=False)}


BEAM = Runner(unknown=unknown_flags, flags=flag_names)


DASK = "DaskRunner"
DASK_NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")


def is_dask(runner: str | None) -> bool:
    """Whether `runner` (as given to --runner) names Beam's DaskRunner, which Beam knows only by its full path."""
    return (runner or "").lower() in DASK_NAMES


def import_dask_options() -> None:
    """Declare DaskRunner's flags (--dask_client_address, ...): a UsageError when dask is not installed."""
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401  (registers DaskOptions)
        import dask.distributed  # noqa: F401
    except ImportError as e:
        raise UsageError(f"--runner DaskRunner needs dask and distributed ({e.name} is not installed): "
                         f"{install_line('dask')}") from None


def runner_object(options: PipelineOptions):
    """The runner object of a DaskRunner job (Beam's --runner knows it only by its module path); else None.

    DirectRunner's is pipeline/beam/direct/runner.py's; Beam makes every other runner from its name.
    """
    if options.view_as(StandardOptions).runner == DASK:
        from apache_beam.runners.dask.dask_runner import DaskRunner

        return DaskRunner()
    return None


def running_mode_given(beam_args: list[str]) -> bool:
    """Whether the command line (or a config file) chose DirectRunner's running mode."""
    return any(a.startswith("--direct_running_mode") for a in beam_args)


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options; DirectRunner defaults to all cores, one worker process each.

    `pile-pipeline run` may then run those workers as threads instead (`running_mode` in
    pipeline/beam/execution.py), once it knows the tokenizer, unless the running mode was given.
    """
    options = PipelineOptions(beam_args)
    test = options.view_as(TestOptions)
    if isinstance(test.dry_run, str):
        # Beam keeps `--dry_run VALUE` as a string, so `--dry_run False` would count as true.
        try:
            test.dry_run = parse_bool(test.dry_run)
        except ValueError as e:
            raise ValueError(f"--dry_run: {e}") from None
    setup = options.view_as(SetupOptions)
    if setup.setup_file == "":
        # `--setup_file ''` unsets a config file's setup_file (e.g. when a worker image holds the package).
        setup.setup_file = None
    standard = options.view_as(StandardOptions)
    if is_dask(standard.runner):
        standard.runner = DASK
        from apache_beam.runners.dask.dask_runner import DaskOptions

        dask = options.view_as(DaskOptions)
        if dask.npartitions is None and dask.partition_size is None:
            # A task per work item: Beam's default puts 128 of them in one task, run by one worker.
            dask.partition_size = 1
    if standard.runner in (None, "DirectRunner", "direct"):
        standard.runner = "DirectRunner"
        direct = options.view_as(DirectOptions)
        if not running_mode_given(beam_args):
            direct.direct_running_mode = "multi_processing"
        if not any(a.startswith("--direct_num_workers") for a in beam_args):
            direct.direct_num_workers = os.cpu_count() or 1
    return options
