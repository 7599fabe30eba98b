"""`pile-pipeline train-tokenizer`: a SentencePiece model trained on a stratified sample of the inputs.

    pile-pipeline train-tokenizer --input 'train/*.jsonl.zst' --model_prefix tokenizers/pile32k/pile32k

writes PREFIX.model, PREFIX.vocab and PREFIX.card.json; `--kind bpe --vocab_size N` instead writes a
byte-level BPE tokenizer.json (GPT-NeoX-20B's recipe) in the directory PREFIX/ (pipeline/tokenize/bpe_trainer.py).
The sample's rules, the trainer and the card are described in pipeline/tokenize/sample.py, trainer.py
and card.py; the sample is drawn by a Beam job, so every Beam flag works here as for `pile-pipeline run`.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile

import fsspec

from pipeline.beam.logs import configure_logging
from pipeline.beam.options import BEAM
from pipeline.beam.sample import draw_sample
from pipeline.config.stages import add_stage_options, stage_options_from
from pipeline.config.tokenizer import SampleConfig, TrainerConfig, TrainTokenizerCommand
from pipeline.core.extras import require
from pipeline.core.options import ArgumentParser, UsageError, command_parser, parse_command_line, values_from
from pipeline.core.subsets import PILE_SUBSETS
from pipeline.core.tables import format_table
from pipeline.io.urls import refuse_credentials
from pipeline.tokenize.bpe_trainer import output_files, train_bpe_from_sample
from pipeline.tokenize.sample import load_sample_stats
from pipeline.tokenize.trainer import train_from_sample

LOG = logging.getLogger("pipeline.train_tokenizer")


def build_parser() -> ArgumentParser:
    """The command's flags: where things go, the sample's, the trainer's, the sample's stages'."""
    parser = command_parser("pile-pipeline train-tokenizer", __doc__, (TrainTokenizerCommand, "command"),
                            (SampleConfig, "sample"), (TrainerConfig, "trainer (defaults: Llama-2's)"))
    add_stage_options(parser)
    return parser


def parse_args(argv: list[str]) -> tuple[TrainTokenizerCommand, SampleConfig | None, TrainerConfig, list[str]]:
    """The command, the sample config (None with --from_sample), the trainer config and Beam's flags."""
    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    try:
        command = TrainTokenizerCommand(**values_from(TrainTokenizerCommand, namespace))
        drawing = not command.from_sample
        if command.from_sample and ("inputs" in vars(namespace) or command.sample_only):
            raise UsageError("--from_sample trains from an existing sample: drop --input and --sample_only")
        if command.from_sample and ("filters" in vars(namespace) or stage_options_from(namespace)):
            raise UsageError("--from_sample trains from an existing sample, its stages applied when it was drawn: "
                             "drop --filters and the stages' options")
        if not command.model_prefix and not command.sample_only:
            raise UsageError("missing required flag: --model_prefix (unless --sample_only)")
        if command.sample_only and not command.work_dir:
            raise UsageError("--sample_only needs --work_dir (where the sample is kept)")
        if drawing and "inputs" not in vars(namespace):
            raise UsageError("missing required flag: --input (or --from_sample WORK_DIR)")
        sample = (SampleConfig(**values_from(SampleConfig, namespace), stage_options=stage_options_from(namespace))
                  if drawing else None)
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
    if command.kind == "bpe":
        require("tokenizers")  # before the sample is drawn
    if command.model_prefix:
        refuse_credentials([("--model_prefix", command.model_prefix)])
        wanted = (output_files(command.model_prefix) if command.kind == "bpe"
                  else [command.model_prefix + ext for ext in (".model", ".vocab", ".card.json")])
        existing = [path for path in wanted if _exists(path)]
        if existing and not command.overwrite:
            raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace the tokenizer")
    # The card's arguments: where the sample came from and where the model went.
    arguments = {"model_prefix": command.model_prefix}
    if command.from_sample:
        stats = load_sample_stats(command.from_sample)
        print_sample(stats)
        return train(command, trainer, command.from_sample, {**arguments, "from_sample": command.from_sample})
    own_work_dir = command.work_dir is None
    work_dir = command.work_dir or tempfile.mkdtemp(prefix="tokenizer-sample-")
    try:
        stats = draw_sample(sample, work_dir, beam_args)
        print_sample(stats)
        if command.sample_only:
            return None
        return train(command, trainer, work_dir, {**arguments, "input": list(sample.inputs)})
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def train(command: TrainTokenizerCommand, trainer: TrainerConfig, work_dir: str, arguments: dict) -> dict:
    """Train the tokenizer of --kind on the sample in `work_dir`; returns its card."""
    if command.kind == "bpe":
        return train_bpe_from_sample(work_dir, command.model_prefix, trainer.vocab_size, {**arguments, "kind": "bpe"})
    return train_from_sample(work_dir, command.model_prefix, trainer, arguments)


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
