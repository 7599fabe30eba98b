"""`pile-pipeline tokenizer-report`: compare tokenizers of any kind on a stratified sample, per subset.

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
from pipeline.config.inputs import DocumentLayout
from pipeline.config.tokenizer import SampleConfig, TokenizerReportCommand
from pipeline.core.extras import missing_extra
from pipeline.core.options import ArgumentParser, UsageError, command_parser, options_from, parse_command_line
from pipeline.core.subsets import ALL_NAMES, resolve_selection
from pipeline.io.urls import redact_url
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.report import measure, model_labels, plot, results_table, summarize
from pipeline.tokenize.sample import iter_sample, load_sample_stats

LOG = logging.getLogger("pipeline.tokenizer_report")


def build_parser() -> ArgumentParser:
    """The command's flags (Beam's are checked by `parse_command_line`)."""
    return command_parser("pile-pipeline tokenizer-report", __doc__, TokenizerReportCommand)


def parse_args(argv: list[str]) -> tuple[TokenizerReportCommand, list[str]]:
    """The command's settings and Beam's flags."""
    namespace, beam_args = parse_command_line(build_parser(), argv, BEAM)
    command = options_from(TokenizerReportCommand, namespace)
    if bool(command.inputs) == bool(command.from_sample):
        raise UsageError("give --input (to draw a sample) or --from_sample WORK_DIR, not both")
    return command, beam_args


def main(argv: list[str] | None = None) -> dict:
    """Sample, measure every model, print the table, write the PNG (and JSON); returns the results."""
    argv = sys.argv[1:] if argv is None else argv
    args, beam_args = parse_args(argv)
    labels = model_labels(list(args.tokenizer_model), list(args.label) or None)
    # Fail fast on a missing or broken tokenizer (of any kind), before sampling.
    digests = [load_tokenizer(path).sha256 for path in args.tokenizer_model]
    subsets, exclude = resolve_selection(args.subsets, args.exclude_subsets, args.any_names)
    every = subsets == (ALL_NAMES,)
    work_dir = args.from_sample or args.work_dir or tempfile.mkdtemp(prefix="tokenizer-report-")
    own_work_dir = not (args.from_sample or args.work_dir)
    try:
        if args.from_sample:
            stats = load_sample_stats(work_dir)
        else:
            config = SampleConfig(
                inputs=args.inputs,
                sample_bytes=int(args.sample_mb_per_subset * 1e6 * (1 if every else len(subsets))),
                weights="natural" if every else "uniform",
                subsets=subsets,
                exclude_subsets=exclude,
                **{f.name: getattr(args, f.name) for f in dataclasses.fields(DocumentLayout)},
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
    report = {
        "models": {label: {"path": redact_url(path), "sha256": sha}
                   for label, path, sha in zip(labels, args.tokenizer_model, digests, strict=True)},
        "sample": {k: stats[k] for k in ("sha256", "documents", "bytes", "config")},
        "results": results,
    }
    if args.json:  # before the chart, which needs an extra package
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        print(f"numbers: {args.json}")
    try:
        plot(results, args.out, title)
    except ImportError as e:
        line = missing_extra(e)
        if line is None:
            raise
        kept = f"; the numbers are in {args.json}" if args.json else "; --json FILE keeps the numbers"
        raise ChartNotWritten(f"chart {args.out} not written: {line}{kept}") from None
    print(f"chart: {args.out}")
    return report


class ChartNotWritten(ValueError):
    """The measures are done (table printed, JSON written), but the chart's package is missing."""


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
