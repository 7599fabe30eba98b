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

from pipeline.core.options import Runner, parse_bool


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


# Beam's in-process workers (DirectRunner's multi_threading) flush their outputs from a timer thread
# every second. A flush between two writes of one element (the GIL goes to the timer while Python
# code encodes it: pickling a numpy array's dtype is Python) sends half an element, which its reader
# cannot decode: the job fails, or runs out of memory on a length read from the wrong bytes. The same
# workers with a time limit no job reaches flush whole elements only (by size, and when a bundle ends).
NO_TIMED_FLUSH_MS = 7 * 24 * 3600 * 1000
_ADVICE = "If direct_num_workers is not equal to 1, direct_running_mode should be"


class _NoRunningModeAdvice(logging.Filter):
    """Beam advises against in_memory with several workers: ours are threads, given as their environment."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_ADVICE)


def direct_runner(options: PipelineOptions):
    """The runner object of a DirectRunner job: Beam's FnApiRunner; None for other runners (Beam makes them).

    Beam's DirectRunner first tries its Prism runner, a Go binary it downloads from GitHub at run
    time, and falls back to the FnApiRunner when that fails (offline, for one): the same command
    would run on two different runners depending on the network. Ours always run on the FnApiRunner,
    with the pipeline options handed to its workers as DirectRunner hands them. Worker threads
    (`--direct_running_mode multi_threading`) run in the embedded gRPC environment Beam would give
    them, without its timed flushes (NO_TIMED_FLUSH_MS); worker processes (`multi_processing`) run
    Beam's SDK worker through pipeline/beam/sdk_worker.py. The options then say in_memory, the mode
    in which the runner keeps the environment it is given.
    """
    if options.view_as(StandardOptions).runner != "DirectRunner":
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.transforms.environments import EmbeddedPythonGrpcEnvironment, SubprocessSDKEnvironment

    from pipeline.beam.sdk_worker import COMMAND

    direct, environment = options.view_as(DirectOptions), None
    if direct.direct_running_mode in ("multi_threading", "multi_processing"):
        if direct.direct_running_mode == "multi_threading":
            environment = EmbeddedPythonGrpcEnvironment(data_buffer_time_limit_ms=NO_TIMED_FLUSH_MS)
        else:
            environment = SubprocessSDKEnvironment.from_command_string(command_string=COMMAND)
        direct.direct_running_mode = "in_memory"
        runner_log = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
        if not any(isinstance(f, _NoRunningModeAdvice) for f in runner_log.filters):
            runner_log.addFilter(_NoRunningModeAdvice())
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return FnApiRunner(default_environment=environment, provision_info=ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


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
    if standard.runner in (None, "DirectRunner", "direct"):
        standard.runner = "DirectRunner"
        direct = options.view_as(DirectOptions)
        if not running_mode_given(beam_args):
            direct.direct_running_mode = "multi_processing"
        if not any(a.startswith("--direct_num_workers") for a in beam_args):
            direct.direct_num_workers = os.cpu_count() or 1
    return options
