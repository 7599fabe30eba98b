"""`pile-pipeline tokenizer-report`: compare SentencePiece models on a stratified sample, per subset.

    pile-pipeline tokenizer-report --input 'val.jsonl.zst' --tokenizer_model a.model \
        --tokenizer_model b.model --out report.png [--json report.json]

What is measured and how is described in pipeline/tokenize/report.py. The sample is drawn by the
tokenizer trainer's Beam job (every Beam flag works), with the same budget for every subset.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import tempfile

from pipeline.beam.logs import configure_logging
from pipeline.beam.options import BEAM
from pipeline.beam.sample import draw_sample
from pipeline.core.options import ArgumentParser, UsageError, add_options, option, parse_command_line, values_from
from pipeline.core.subsets import PILE_SUBSETS, parse_exclude, parse_subsets
from pipeline.io.files import sha256_of
from pipeline.io.urls import redact_url
from pipeline.tokenize.model import load_processor
from pipeline.tokenize.report import measure, model_labels, plot, results_table, summarize
from pipeline.tokenize.training import SampleConfig, iter_sample, load_sample_stats

LOG = logging.getLogger("pipeline.tokenizer_report")


@dataclasses.dataclass(frozen=True)
class Command:
    """The report's flags."""

    tokenizer_model: tuple[str, ...] = option(
        help="SentencePiece .model; repeat (or give several) to compare models on the same sample",
        many=True, required=True, metavar="FILE")
    out: str = option(help="PNG chart to write", metavar="PNG")
    inputs: tuple[str, ...] = option(
        (), flag="--input", many=True, metavar="PATTERN", shown_default="none; required unless --from_sample",
        help="globs or fsspec URLs of .jsonl.zst/.jsonl.gz/.jsonl files (use held-out data)")
    label: tuple[str, ...] = option((), many=True, help="a name per --tokenizer_model, in order")
    json: str | None = option(None, metavar="FILE", shown_default="no JSON", help="also write the numbers as JSON here")
    sample_mb_per_subset: float = option(1.0, help="text sampled per subset, MB (a subset with less gives all it has)")
    subsets: tuple[str, ...] = option(PILE_SUBSETS, parse=parse_subsets, metavar="SUBSETS", shown_default="all",
                                      help="'all', 'uncopyrighted', or a comma list")
    exclude_subsets: tuple[str, ...] = option((), parse=parse_exclude, metavar="SUBSETS",
                                              help="comma list of subsets to leave out")
    seed: int = option(1, help="sampling seed (the trainer's default is 0, so held-out text is not its sample)")
    max_doc_chars: int = option(100_000, help="documents are cut to this many characters")
    on_corrupt_file: str = option("fail", choices=("fail", "skip"),
                                  help="fail on a damaged input file, or keep what was read before the damage")
    work_dir: str | None = option(None, metavar="DIR", help="keep the sample here (default: a temporary directory)")
    from_sample: str | None = option(
        None, metavar="DIR", shown_default="none: draw a sample from --input",
        help="measure on a sample already drawn (a --work_dir of this command or the trainer's)")


def build_parser() -> ArgumentParser:
    """The command's flags (Beam's are checked by `parse_command_line`)."""
    parser = ArgumentParser(prog="pile-pipeline tokenizer-report", description=__doc__)
    parser.add_argument("--config", metavar="FILE", help="TOML file with [pipeline] and [beam] tables")
    add_options(parser, Command)
    return parser


def parse_args(argv: list[str]) -> tuple[Command, list[str]]:
    """The command's settings and Beam's flags."""
    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    command = Command(**values_from(Command, namespace))
    if bool(command.inputs) == bool(command.from_sample):
        raise UsageError("give --input (to draw a sample) or --from_sample WORK_DIR, not both")
    return command, beam_args


def main(argv: list[str] | None = None) -> dict:
    """Sample, measure every model, print the table, write the PNG (and JSON); returns the results."""
    argv = sys.argv[1:] if argv is None else argv
    args, beam_args = parse_args(argv)
    labels = model_labels(list(args.tokenizer_model), list(args.label) or None)
    for path in args.tokenizer_model:
        load_processor(path)  # fail fast on a missing or broken model, before sampling
    subsets = tuple(s for s in args.subsets if s not in args.exclude_subsets)
    work_dir = args.from_sample or args.work_dir or tempfile.mkdtemp(prefix="tokenizer-report-")
    own_work_dir = not (args.from_sample or args.work_dir)
    try:
        if args.from_sample:
            stats = load_sample_stats(work_dir)
        else:
            config = SampleConfig(
                inputs=args.inputs,
                sample_bytes=int(args.sample_mb_per_subset * 1e6 * len(subsets)),
                weights="uniform",
                subsets=subsets,
                seed=args.seed,
                max_doc_chars=args.max_doc_chars,
                on_corrupt_file=args.on_corrupt_file,
            )
            stats = draw_sample(config, work_dir, beam_args)
        results = {}
        for label, path in zip(labels, args.tokenizer_model, strict=True):
            LOG.info("measuring %s", redact_url(path))
            results[label] = summarize(measure(path, iter_sample(work_dir)))
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(results_table(results))
    print(f"sample: {stats['documents']} documents, {stats['bytes'] / 1e6:.2f} MB, sha256 {stats['sha256'][:16]}; "
          f"bad lines skipped: {sum(stats['dead_letters'].values())}")
    title = (f"{' vs '.join(labels)} on {stats['documents']} documents, {stats['bytes'] / 1e6:.1f} MB "
             f"(sample sha256 {stats['sha256'][:12]})")
    plot(results, args.out, title)
    print(f"chart: {args.out}")
    report = {
        "models": {label: {"path": redact_url(path), "sha256": sha256_of(path)}
                   for label, path in zip(labels, args.tokenizer_model, strict=True)},
        "sample": {k: stats[k] for k in ("sha256", "documents", "bytes", "config")},
        "results": results,
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        print(f"numbers: {args.json}")
    return report


def cli(argv: list[str] | None = None) -> int:
    """The command: exit status 0, or 2 with one line for a mistake in the command or its inputs."""
    configure_logging()
    try:
        main(argv)
    except (ValueError, FileNotFoundError) as e:
        LOG.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
