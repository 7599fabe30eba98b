"""`pile-pipeline train-classifier`: a fastText quality classifier of positive vs negative documents (DCLM's recipe).

    pile-pipeline train-classifier --positive 'good/*.jsonl' --negative 'web/*.parquet' --model hq.bin

writes hq.bin (a supervised fastText model: labels hq and cc) and hq.card.json (its data, settings
and held-out measures), and prints the held-out precision, recall and AUC. The model is what
`--filters fasttext_classifier --fasttext_model hq.bin --fasttext_keep_labels hq:0.5` runs. The
recipe: pipeline/stages/classifier_training.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from pipeline.beam.logs import configure_logging
from pipeline.config.inputs import DocumentLayout
from pipeline.core.documents import Schema
from pipeline.core.extras import require
from pipeline.core.options import UsageError, command_parser, option, options_from, parse_command_line
from pipeline.stages import classifier_sides
from pipeline.stages import classifier_training as recipe

LOG = logging.getLogger("pipeline.train_classifier")
SIDE_HELP = ("globs of .jsonl[.zst|.gz], .parquet or .arrow files or save_to_disk folders; several after one flag, "
             "or the flag repeated")


def parse_fraction(value) -> float:
    """A fraction in (0, 1)."""
    fraction = float(value)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"a fraction in (0, 1), got {value}")
    return fraction


def parse_positive(value) -> int:
    """An integer >= 1."""
    number = int(value)
    if number < 1:
        raise ValueError(f"at least 1, got {value}")
    return number


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainClassifierCommand(DocumentLayout):
    """Every flag of train-classifier."""

    positive: tuple = option((), many=True, metavar="PATTERN", shown_default="none: required without --from_output",
                             help="positive (kept) documents: " + SIDE_HELP)
    negative: tuple = option((), many=True, metavar="PATTERN", shown_default="none: required without --from_output",
                             help="negative documents: " + SIDE_HELP)
    from_output: str | None = option(None, metavar="DIR", shown_default="none",
                                     help="instead of --positive/--negative: a job's output; its inputs' documents "
                                     "the job kept are positive, those it removed negative")
    removed_reason: tuple = option((), parse=lambda v: tuple(x for x in str(v).split(",") if x), metavar="NAMES",
                                   shown_default="every reason",
                                   help="with --from_output: only documents removed for these reasons (stage names) "
                                   "are negative")
    model: str = option(metavar="PATH", help="the model file to write (.bin); its card goes beside it (.card.json)")
    word_ngrams: int = option(2, parse=parse_positive, metavar="N", help="word n-grams (2: bigrams, DCLM's)")
    dim: int = option(100, parse=parse_positive, metavar="N", help="the word vectors' dimension")
    epoch: int = option(5, parse=parse_positive, metavar="N", help="passes over the training documents")
    lr: float = option(0.1, parse=float, metavar="RATE", help="the learning rate")
    min_count: int = option(1, parse=parse_positive, metavar="N", help="words seen fewer times are dropped")
    threads: int = option(1, parse=parse_positive, metavar="N",
                          help="training threads; only 1 gives the same model file on every run")
    seed: int = option(0, parse=int, help="the held-out split's, the shuffle's and fastText's seed")
    held_out: float = option(0.1, parse=parse_fraction, metavar="FRACTION",
                             help="documents of each side held out to measure the model")
    max_documents: int = option(0, parse=int, metavar="N", shown_default="0: all",
                                help="read at most N documents of each side, in input order")
    max_line_mb: int = option(64, parse=parse_positive, metavar="MB", help="longer lines are skipped")
    overwrite: bool = option(False, help="replace an existing model file and card")


def build_parser():
    """The command's flags."""
    return command_parser("pile-pipeline train-classifier", __doc__, (TrainClassifierCommand, "command"))


def parse_args(argv: list[str]):
    """The command's options (UsageError naming the flag)."""
    namespace, rest = parse_command_line(build_parser(), argv, None)
    if rest:
        raise UsageError(f"unrecognized arguments: {' '.join(rest)}")
    return options_from(TrainClassifierCommand, namespace)


def main(argv: list[str] | None = None) -> dict:
    """Read both sides, train, print the measures; returns the card."""
    command = parse_args(sys.argv[1:] if argv is None else argv)
    require("fasttext_new")
    card = recipe.card_path(command.model)
    existing = [path for path in (command.model, card) if os.path.exists(path)]
    if existing and not command.overwrite:
        raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace the model")
    max_bytes = command.max_line_mb << 20
    if command.from_output:
        if command.positive or command.negative:
            raise UsageError("--from_output takes both sides from the output: drop --positive and --negative")
        positive, negative = [], []
        for removed, text in classifier_sides.sides(command.from_output, command.removed_reason, max_bytes):
            side = negative if removed else positive
            if not command.max_documents or len(side) < command.max_documents:
                side.append(text)
        what = f"in the inputs of {command.from_output} (positive: kept by the job, negative: removed)"
    else:
        if not command.positive or not command.negative:
            raise UsageError("missing required flags: --positive and --negative (or --from_output)")
        schema = Schema(command.text_key, command.subset_key, command.default_subset or "unnamed", True)
        positive = list(recipe.read_texts(command.positive, schema, max_bytes, command.max_documents))
        negative = list(recipe.read_texts(command.negative, schema, max_bytes, command.max_documents))
        what = "in the files given"
    for flag, texts in (("--positive", positive), ("--negative", negative)):
        if not texts:
            raise ValueError(f"{flag}: no document with a non-empty `{command.text_key}` {what}")
    settings = recipe.FastTextSettings(command.word_ngrams, command.dim, command.epoch, command.lr,
                                       command.min_count, command.threads, command.seed)
    measures, counts = recipe.train(positive, negative, command.model, settings, command.held_out)
    arguments = {"positive": list(command.positive), "negative": list(command.negative),
                 "text_key": command.text_key, "held_out": command.held_out, "max_documents": command.max_documents}
    if command.from_output:
        arguments.update(from_output=command.from_output, removed_reason=list(command.removed_reason))
    written = recipe.write_card(command.model, arguments, settings, counts, measures)
    print(f"documents: {counts['positive']} positive, {counts['negative']} negative; trained on {counts['train']}, "
          f"held out {measures.documents}")
    print(f"held out: precision {measures.precision:.4f}, recall {measures.recall:.4f} (hq at 0.5), "
          f"AUC {measures.auc:.4f}")
    print(f"model: {command.model} (sha256 {written['sha256'][:16]}...), card: {card}"
          + ("" if settings.threads == 1 else f"; {settings.threads} threads: not deterministic"))
    return written


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
