"""`pile-pipeline run` (or `python -m pipeline.run`): JSON-lines files -> token shards + manifest.

    pile-pipeline run --input 'train/*.jsonl.zst' --output_dir out --tokenizer_model m.model

Any other JSON-lines corpus: say where each line keeps its text and subset name, e.g.

    pile-pipeline run --input 'data/*.jsonl' --output_dir out --tokenizer_model m.model \
        --text_key body --subset_key source.name --subset_names any --default_subset other

Our flags are declared on `PipelineConfig` (pipeline/config/job.py); every other flag must be one
of Beam's (`--runner`, `--direct_num_workers`, `--project`, ...). `--config FILE` reads a TOML file
(see beam_configs/) whose [pipeline] and [beam] tables come before the command line.

The flags are parsed once. The tokenizer model is read once, here, and Beam is imported only once a
fast tokenizer's self-check has started in a process of its own (`EarlyChoice`, handed that model),
so that the two overlap; the start-up tricks of a one-command process are pipeline/startup/'s,
entered through `tuned_job`. The job itself is pipeline/beam/launch.py.
"""

from __future__ import annotations

import logging
import sys

from pipeline.beam.logs import JobFailed, configure_logging
from pipeline.beam.runners.registry import row_of
from pipeline.config.job import PipelineConfig
from pipeline.config.stages import add_stage_options, stage_options_from
from pipeline.core.options import (
    ArgumentParser,
    check_runner_flags,
    command_parser,
    options_from,
    parse_command_line,
    parse_own_flags,
    runner_flag,
)
from pipeline.format.manifest import ManifestError
from pipeline.io.scratch import private_temp_dir
from pipeline.io.signals import Interrupted, caught_signal, interruptible
from pipeline.io.urls import is_local_url, refuse_credentials
from pipeline.startup.command import tuned_job
from pipeline.startup.early_check import EarlyChoice
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.model import TokenizerModel

LOG = logging.getLogger("pipeline")


def build_parser() -> ArgumentParser:
    """Our flags, from PipelineConfig and the stages' options (Beam's are checked by `parse_command_line`)."""
    parser = command_parser("pile-pipeline run", __doc__, PipelineConfig,
                            config_help="TOML file with [pipeline] and [beam] tables (beam_configs/)")
    add_stage_options(parser)
    return parser


def parse_args(argv: list[str]) -> tuple[PipelineConfig, list[str]]:
    """Our config and Beam's flags; any mistake is a UsageError naming the flag."""
    from pipeline.beam.options import BEAM  # imports Beam

    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    return config_of(namespace), beam_args


def config_of(namespace) -> PipelineConfig:
    """The job's config from our parsed flags (a ValueError names a wrong value)."""
    return options_from(PipelineConfig, namespace, stage_options=stage_options_from(namespace))


def early_choice(config: PipelineConfig | None) -> tuple[EarlyChoice | None, TokenizerModel | None]:
    """The tokenizer model, read before Beam is imported, and its backend self-check, started.

    (None, None) when the config is not valid, the model cannot be read or is not a local file: any
    mistake is left for the job's checks to report, in their order (a model in a store is read
    after the checks of where the workers run, pipeline/beam/preflight.py).
    """
    if config is None or config.tokenizer_model is None:  # a JSON-lines job may have no tokenizer
        return None, None
    try:
        refuse_credentials([("--input", u) for u in config.inputs] + [("--tokenizer_model", config.tokenizer_model)])
        if not is_local_url(config.tokenizer_model):
            return None, None
        model = TokenizerModel.load(config.tokenizer_model, tiktoken_name=config.tiktoken_encoding)
    except (ValueError, OSError):
        return None, None
    requested = config.tokenizer_backend or KINDS[model.kind].reference
    return EarlyChoice(requested, model, list(config.inputs), config.schema), model


def main(argv: list[str] | None = None) -> dict | None:
    """Run the pipeline; returns the manifest it wrote (None when the job was only translated).

    The command line is parsed once: our flags first (the tokenizer's self-check starts from them,
    before Beam is imported), Beam's checked once Beam is.
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    namespace, rest = parse_own_flags(parser, argv)
    try:
        config, invalid = config_of(namespace), None
    except ValueError as e:  # reported after Beam's flags are checked, as `parse_args` orders them
        config, invalid = None, e
    early, model = early_choice(config)
    try:
        with tuned_job(row_of(runner_flag(rest)).lean_beam):
            from pipeline.beam.options import BEAM

            check_runner_flags(parser, rest, BEAM)
            if invalid is not None:
                raise invalid
            from pipeline.beam.launch import run_job  # Beam, while the self-check runs

            return run_job(config, rest, early, model)
    finally:
        if early is not None:
            early.cancel()


def cli(argv: list[str] | None = None) -> int:
    """The command: exit status 0, 2 or 1, and one line for every failure of ours.

    2: a mistake found before the job starts (the command, its inputs, the output directory, a store
    out of reach). 1: the job failed on a damaged input, a full disk or an output it refuses to publish.
    128 + N: stopped by signal N (143: SIGTERM, 130: SIGINT), its workers stopped and its files removed
    but for the work items it finished (OUT/.resume/), which `--resume` takes up.
    """
    configure_logging()
    try:
        try:
            with interruptible(), private_temp_dir():
                main(argv)
        except BaseException:
            if caught_signal() is None:
                raise
            raise Interrupted(caught_signal()) from None  # whatever the runner made of it
    except Interrupted as e:
        LOG.error("stopped by %s: the workers were stopped and what this run made was removed, but for the work "
                  "items it finished (run it again with --resume to take them up)", e)
        return 128 + e.signum
    except JobFailed as e:
        LOG.error("%s", e)
        return 1
    except (ValueError, OSError, ManifestError) as e:
        LOG.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
