"""`pile-pipeline removed OUTPUT_DIR [--reason R] [--rule R] [--subset S] [--sample N --seed S] [--format json]`.

Prints the documents a run removed (and those it cut) with their text: the records of its removed/
files, each document read back from its input by file and line, and decided again by the run's own
stages (the options its manifest records), so that a cut shows its text before and after and every
record's fields show the value that decided. An input that changed since the run is refused, naming
the file (its line count and size are the manifest's, and the decision is the record's), never shown
as what was removed.

    pile-pipeline removed out --sample 2 --per_rule          # two documents of each rule
    pile-pipeline removed out --reason c4_quality_cut --sample 5 --seed 1
    pile-pipeline removed out --rule gopher_short_doc --subset Pile-CC --format json > short.jsonl

Exit status: 0 with documents printed; 1 when none matches; 2 with one line for a flag, an output
or an input that cannot be used.
"""

from __future__ import annotations

import os
import sys

from pipeline.core.options import ArgumentParser, UsageError
from pipeline.format.manifest import ManifestError
from pipeline.inspect.listing import format_json, format_text
from pipeline.inspect.output import Output, rule_of
from pipeline.inspect.removed import nothing_matched, removed_documents
from pipeline.inspect.select import Selection

TEXT_CHARS = 1000


def _names(values) -> frozenset:
    return frozenset(name.strip() for value in values or () for name in value.split(",") if name.strip())


def build_parser() -> ArgumentParser:
    """The command's flags."""
    p = ArgumentParser(prog="pile-pipeline removed", description=__doc__)
    p.add_argument("output_dir", help="the pipeline's output directory (a run with --filters, --dedup or "
                   "--decontaminate); a --split_by output's OUT, a --per_subset output's subset directory")
    p.add_argument("--reason", action="append", metavar="REASON", help="only records of this reason: a stage's "
                   "name, <stage>_cut, duplicate_exact, duplicate_near, contaminated, contaminated_cut (repeat "
                   "the flag, or a,b; default: every reason)")
    p.add_argument("--rule", action="append", metavar="RULE", help="only records of this rule (gopher_short_doc, "
                   "c4_lines_removed, ...; default: every rule)")
    p.add_argument("--subset", action="append", metavar="NAME",
                   help="only documents of this subset (default: every subset)")
    p.add_argument("--sample", type=int, metavar="N", help="N records chosen by a seeded hash (default: every record)")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed (default: 0)")
    p.add_argument("--per_rule", action="store_true", help="with --sample: N records of each reason and rule "
                   "(default: N in all)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for a person, or JSON lines: the record, text, text_after for a cut (default: text)")
    p.add_argument("--chars", type=int, metavar="N", help=f"characters of each text shown, 0 for all (default: "
                   f"{TEXT_CHARS} as text, all as JSON)")
    return p


def main(argv=None) -> int:
    """Parse the flags and print the documents; the exit status."""
    args = build_parser().parse_args(argv)
    if args.sample is not None and args.sample < 1:
        raise UsageError(f"--sample {args.sample}: give a number of records >= 1")
    if args.per_rule and args.sample is None:
        raise UsageError("--per_rule takes a --sample N to take of each rule")
    if args.chars is not None and args.chars < 0:
        raise UsageError(f"--chars {args.chars}: give 0 (all) or more")
    chars = args.chars if args.chars is not None else TEXT_CHARS if args.format == "text" else 0
    output = Output.open(args.output_dir)
    selection = Selection(_names(args.reason), _names(args.rule), _names(args.subset))
    items = removed_documents(output, selection, args.sample, args.seed, args.per_rule)
    if args.per_rule:  # a sample: small; shown rule by rule
        items = iter(sorted(items, key=lambda s: (s.record["reason"], rule_of(s.record), s.record["file_index"],
                                                  s.record["line"])))
    shown = 0
    for item in items:
        print(format_json(item, chars) if args.format == "json" else format_text(item, chars), flush=False)
        shown += 1
    sys.stdout.flush()
    if not shown:
        print(f"pile-pipeline removed: {nothing_matched(output, selection)}", file=sys.stderr)
        return 1
    return 0


def cli(argv=None) -> int:
    """The command: its exit status; 2 with one line for what cannot be used."""
    try:
        return main(argv)
    except (UsageError, ManifestError, FileNotFoundError, LookupError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(cli())
