"""`pile-pipeline report OUTPUT_DIR [--compare OUTPUT_DIR2] [--html FILE]`: one HTML page of what a run did.

The page is self-contained (figures inline, no script, nothing fetched when it is viewed): the
funnel from input lines to kept documents (dead letters, each stage's removals, dedup) in documents
and tokens; per subset, kept and removed; each rule's removals and the subsets they fire on; length
distributions of kept and removed documents; the values that decided (the numeric fields of the
removed/ records, with their thresholds); language and classifier labels; dedup's cluster sizes;
packing; and a few removed documents of each rule, escaped and cut short. Every number is the
manifest's (per-rule counts from removed/ where the manifest has none; a --split_by output's from
buckets.json, with a table of its buckets). With --compare, two runs
side by side, each count with the difference: what changing an option did.

The inputs are read once, to draw length distributions and show documents, after checking that
they are the files the run read; --no_inputs leaves both out (inputs out of reach, a quick look).

    pile-pipeline report out --html out-report.html
    pile-pipeline report out-gopher50 --compare out-gopher80 --html threshold.html
"""

from __future__ import annotations

import os
import posixpath
import sys

from pipeline.core.options import ArgumentParser, UsageError
from pipeline.format.manifest import ManifestError
from pipeline.inspect.report import build, collect
from pipeline.io.publish import publish_text
from pipeline.io.urls import redact_url


def build_parser() -> ArgumentParser:
    """The command's flags."""
    p = ArgumentParser(prog="pile-pipeline report", description=__doc__)
    p.add_argument("output_dir", help="the pipeline's output directory; a --split_by output's OUT (its buckets "
                   "too), a --per_subset output's subset directory")
    p.add_argument("--compare", metavar="OUTPUT_DIR2", help="a second output, shown beside the first (default: none)")
    p.add_argument("--html", default="report.html", metavar="FILE",
                   help="where to write the page, outside the output directories (default: report.html)")
    p.add_argument("--examples", type=int, default=3, metavar="N", help="removed documents shown of each rule "
                   "(default: 3)")
    p.add_argument("--seed", type=int, default=0, help="which documents are shown: the seed of their sample "
                   "(default: 0)")
    p.add_argument("--chars", type=int, default=2000, metavar="N", help="characters of each document shown "
                   "(default: 2000)")
    p.add_argument("--no_inputs", action="store_true", help="do not read the inputs: no length distributions, "
                   "no documents shown (default: read them)")
    return p


def _inside(path: str, folder: str) -> bool:
    path, folder = (posixpath.normpath(os.path.abspath(p)) if "://" not in p else p.rstrip("/") for p in (path, folder))
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def main(argv=None) -> str:
    """Parse the flags, write the page; where it was written."""
    args = build_parser().parse_args(argv)
    if args.examples < 0:
        raise UsageError(f"--examples {args.examples}: give 0 or more")
    if args.chars < 1:
        raise UsageError(f"--chars {args.chars}: give 1 or more")
    for folder in filter(None, (args.output_dir, args.compare)):
        if _inside(args.html, folder):
            raise UsageError(f"--html {args.html}: inside the output {folder}, whose files are the manifest's "
                             "only (--overwrite refuses a directory holding others); write it elsewhere")
    locations = [args.output_dir] + ([args.compare] if args.compare else [])
    labels = ["A", "B"] if args.compare else [args.output_dir]
    runs, comparison = collect(locations, labels, args.examples, args.seed, not args.no_inputs)
    publish_text(args.html, build(runs, args.chars, comparison))
    return args.html


def cli(argv=None) -> int:
    """The command: 0 with the page written, 2 with one line for what cannot be used."""
    try:
        path = main(argv)
    except (UsageError, ManifestError, FileNotFoundError, LookupError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {redact_url(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
