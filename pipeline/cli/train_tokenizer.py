"""`pile-pipeline train-tokenizer`: a SentencePiece model trained on a stratified sample of the inputs.

    pile-pipeline train-tokenizer --input 'train/*.jsonl.zst' --model_prefix tokenizers/pile32k/pile32k

writes PREFIX.model, PREFIX.vocab and PREFIX.card.json. The sample's rules, the trainer and the
card are described in pipeline/tokenize/training.py; the sample is drawn by a Beam job, so every
Beam flag works here as for `pile-pipeline run`.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
import tempfile

import fsspec

from pipeline.beam.logs import configure_logging
from pipeline.beam.options import BEAM
from pipeline.beam.sample import draw_sample
from pipeline.core.options import ArgumentParser, UsageError, add_options, option, parse_command_line, values_from
from pipeline.core.subsets import PILE_SUBSETS
from pipeline.core.tables import format_table
from pipeline.io.urls import refuse_credentials
from pipeline.tokenize.training import SampleConfig, TrainerConfig, load_sample_stats, train_from_sample

LOG = logging.getLogger("pipeline.train_tokenizer")


@dataclasses.dataclass(frozen=True)
class Command:
    """Where the sample and the model go; none of it decides the model's bytes."""

    model_prefix: str | None = option(
        None, metavar="PREFIX", shown_default="none; required unless --sample_only",
        help="writes PREFIX.model, PREFIX.vocab, PREFIX.card.json (local path or URL)")
    work_dir: str | None = option(
        None, metavar="DIR", help="keep sample.jsonl and sample_stats.json here (local or s3://; a remote runner "
        "needs a shared location); default: a temporary directory, removed at the end")
    sample_only: bool = option(False, help="stop after drawing the sample into --work_dir")
    from_sample: str | None = option(None, metavar="DIR", shown_default="none: draw a sample from --input",
                                     help="train from the sample already in this work dir instead of drawing one")
    overwrite: bool = option(False, help="replace existing PREFIX.model/.vocab/.card.json")


def build_parser() -> ArgumentParser:
    """The command's flags: where things go, the sample's, the trainer's."""
    parser = ArgumentParser(prog="pile-pipeline train-tokenizer", description=__doc__)
    parser.add_argument("--config", metavar="FILE", help="TOML file with [pipeline] and [beam] tables")
    add_options(parser, Command, "command")
    add_options(parser, SampleConfig, "sample")
    add_options(parser, TrainerConfig, "trainer (defaults: Llama-2's)")
    return parser


def parse_args(argv: list[str]) -> tuple[Command, SampleConfig | None, TrainerConfig, list[str]]:
    """The command, the sample config (None with --from_sample), the trainer config and Beam's flags."""
    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    try:
        command = Command(**values_from(Command, namespace))
        drawing = not command.from_sample
        if command.from_sample and ("inputs" in vars(namespace) or command.sample_only):
            raise UsageError("--from_sample trains from an existing sample: drop --input and --sample_only")
        if not command.model_prefix and not command.sample_only:
            raise UsageError("missing required flag: --model_prefix (unless --sample_only)")
        if command.sample_only and not command.work_dir:
            raise UsageError("--sample_only needs --work_dir (where the sample is kept)")
        if drawing and "inputs" not in vars(namespace):
            raise UsageError("missing required flag: --input (or --from_sample WORK_DIR)")
        sample = SampleConfig(**values_from(SampleConfig, namespace)) if drawing else None
        seed = sample.seed if sample else int(vars(namespace).get("seed", 0))
        trainer = TrainerConfig(**values_from(TrainerConfig, namespace), seed=seed)
    except UsageError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from None
    return command, sample, trainer, beam_args


def _exists(path: str) -> bool:
    fs, fs_path = fsspec.core.url_to_fs(path)
    return fs.exists(fs_path)


def main(argv: list[str] | None = None) -> dict | None:
    """Draw the sample and train; returns the card (None with --sample_only)."""
    argv = sys.argv[1:] if argv is None else argv
    command, sample, trainer, beam_args = parse_args(argv)
    if command.model_prefix:
        refuse_credentials([("--model_prefix", command.model_prefix)])
        existing = [command.model_prefix + ext for ext in (".model", ".vocab", ".card.json")
                    if _exists(command.model_prefix + ext)]
        if existing and not command.overwrite:
            raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace the tokenizer")
    # The card's arguments: where the sample came from and where the model went.
    arguments = {"model_prefix": command.model_prefix}
    if command.from_sample:
        stats = load_sample_stats(command.from_sample)
        print_sample(stats)
        return train_from_sample(command.from_sample, command.model_prefix, trainer,
                                 {**arguments, "from_sample": command.from_sample})
    own_work_dir = command.work_dir is None
    work_dir = command.work_dir or tempfile.mkdtemp(prefix="tokenizer-sample-")
    try:
        stats = draw_sample(sample, work_dir, beam_args)
        print_sample(stats)
        if command.sample_only:
            return None
        return train_from_sample(work_dir, command.model_prefix, trainer, {**arguments, "input": list(sample.inputs)})
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def print_sample(stats: dict) -> None:
    """The sample per subset: available, targeted and sampled MB."""
    rows = [("subset", "available MB", "target MB", "sampled MB", "docs")]
    order = {name: i for i, name in enumerate(PILE_SUBSETS)}
    for name, s in sorted(stats["subsets"].items(), key=lambda kv: order.get(kv[0], len(order))):
        target = s.get("target_bytes")
        rows.append((name, f"{s['bytes_available'] / 1e6:.2f}",
                     "-" if target is None else f"{target / 1e6:.2f}" + (" short" if s.get("short") else ""),
                     f"{s['bytes'] / 1e6:.2f}", str(s["documents"])))
    print(format_table(rows))
    print(f"sample: {stats['documents']} documents, {stats['bytes'] / 1e6:.2f} MB, sha256 {stats['sha256']}; "
          f"bad lines skipped: {sum(stats['dead_letters'].values())} {stats['dead_letters']}")


def cli(argv: list[str] | None = None) -> int:
    """The command: exit status 0, or 2 with one line for a mistake in the command or its inputs."""
    configure_logging()
    try:
        main(argv)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        LOG.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
