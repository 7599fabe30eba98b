"""Beam's side of the command line: the runner's flags, checked, with the runner profile's defaults.

Which runner a job runs on, and what that runner takes, is its profile's (pipeline/beam/runners/):
this module asks the profile of --runner to declare its flags and to set its defaults.
"""

from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, TestOptions

from pipeline.beam.runners.registry import profile_for, profile_of
from pipeline.core.options import Runner, parse_bool, runner_flag


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
    profile_of(runner_flag(flags)).declare_options()
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


def runner_object(options: PipelineOptions):
    """The runner object of a job with these options (its profile's); None: Beam makes it from --runner."""
    return profile_for(options).runner_object(options)


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options, with the runner profile's defaults (DirectRunner: all cores, one worker process each).

    `pile-pipeline run` may then run DirectRunner's workers as threads instead (its profile's
    `workspace`), once it knows the tokenizer, unless the running mode was given.
    """
    options = PipelineOptions(beam_args)
    profile = profile_for(options)
    profile.declare_options()
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
    profile.normalize(options, beam_args)
    profile.check(options)
    return options
