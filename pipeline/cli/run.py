"""`pile-pipeline run` (or `python -m pipeline.run`): JSON-lines files -> token shards + manifest.

    pile-pipeline run --input 'train/*.jsonl.zst' --output_dir out --tokenizer_model m.model

Any other JSON-lines corpus: say where each line keeps its text and subset name, e.g.

    pile-pipeline run --input 'data/*.jsonl' --output_dir out --tokenizer_model m.model \
        --text_key body --subset_key source.name --subset_names any --default_subset other

Our flags are declared on `PipelineConfig` (pipeline/config/job.py); every other flag must be one
of Beam's (`--runner`, `--direct_num_workers`, `--project`, ...). `--config FILE` reads a TOML file
(see beam_configs/) whose [pipeline] and [beam] tables come before the command line.

The tokenizer model is read once, here, and Beam is imported only once a fast tokenizer's
self-check has started in a process of its own (`EarlyChoice`, handed that model), so that the two
overlap; Beam without the cloud connectors a job on DirectRunner never uses (pipeline/beam/lean_import.py).
The job itself is pipeline/beam/launch.py.
"""

from __future__ import annotations

import logging
import sys

from pipeline.beam.lean_import import import_beam
from pipeline.beam.logs import JobFailed, configure_logging
from pipeline.config.job import PipelineConfig
from pipeline.config.stages import add_stage_options, stage_options_from
from pipeline.core import gc_policy, malloc_policy
from pipeline.core.options import ArgumentParser, command_parser, options_from, parse_command_line, parse_own_flags
from pipeline.format.manifest import ManifestError
from pipeline.io.scratch import private_temp_dir
from pipeline.io.signals import Interrupted, caught_signal, interruptible
from pipeline.io.urls import is_local_url, refuse_credentials
from pipeline.tokenize.early_check import EarlyChoice
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
    from pipeline.beam.options import BEAM  # imports Beam (once `import_beam` has)

    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    return options_from(PipelineConfig, namespace, stage_options=stage_options_from(namespace)), beam_args


def own_flags(argv: list[str]) -> tuple | None:
    """(our namespace, Beam's flags unchecked); None for --help or when ours do not parse (`parse_args` says why)."""
    if "-h" in argv or "--help" in argv:
        return None
    try:
        return parse_own_flags(build_parser(), argv)
    except (ValueError, OSError):
        return None


def early_choice(own: tuple | None) -> tuple[EarlyChoice | None, TokenizerModel | None]:
    """The tokenizer model, read from our own flags alone (`own_flags`), and its backend self-check, started.

    (None, None) when the flags do not parse, the model cannot be read or is not a local file: any
    mistake is left for `parse_args` and the job's checks to report, in their order (a model in a
    store is read after the checks of where the workers run, pipeline/beam/preflight.py).
    """
    if own is None:
        return None, None
    try:
        config = options_from(PipelineConfig, own[0])
        refuse_credentials([("--input", u) for u in config.inputs] + [("--tokenizer_model", config.tokenizer_model)])
        if not is_local_url(config.tokenizer_model):
            return None, None
        model = TokenizerModel.load(config.tokenizer_model, tiktoken_name=config.tiktoken_encoding)
    except (ValueError, OSError):
        return None, None
    requested = config.tokenizer_backend or KINDS[model.kind].reference
    return EarlyChoice(requested, model, list(config.inputs), config.schema), model


def main(argv: list[str] | None = None) -> dict | None:
    """Run the pipeline; returns the manifest it wrote (None when the job was only translated)."""
    argv = sys.argv[1:] if argv is None else argv
    own = own_flags(argv)
    early, model = early_choice(own)
    try:
        import_beam(own[1] if own else [])
        config, beam_args = parse_args(argv)
        from pipeline.beam.launch import run_job  # Beam, while the self-check runs

        return run_job(config, beam_args, early, model)
    finally:
        if early is not None:
            early.cancel()


def cli(argv: list[str] | None = None) -> int:
    """The command: exit status 0, 2 or 1, and one line for every failure of ours.

    2: a mistake found before the job starts (the command, its inputs, the output directory, a store
    out of reach). 1: the job failed on a damaged input, a full disk or an output it refuses to publish.
    128 + N: stopped by signal N (143: SIGTERM, 130: SIGINT), its workers stopped and its files removed.
    """
    configure_logging()
    gc_policy.pause()  # until the job's graph is built (pipeline/beam/launch.py)
    malloc_policy.keep_freed_memory()
    try:
        try:
            with interruptible(), private_temp_dir():
                main(argv)
        except BaseException:
            if caught_signal() is None:
                raise
            raise Interrupted(caught_signal()) from None  # whatever the runner made of it
    except Interrupted as e:
        LOG.error("stopped by %s: the workers were stopped and what this run made was removed", e)
        return 128 + e.signum
    except JobFailed as e:
        LOG.error("%s", e)
        return 1
    except (ValueError, OSError, ManifestError) as e:
        LOG.error("%s", e)
        return 2
    finally:
        gc_policy.resume()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
