"""`pile-pipeline data-path OUTPUT_DIR`: Megatron's `--data-path` (or NeMo's `data_prefix`) for a Megatron output.

    pile-pipeline data-path s3://bucket/pile-megatron --epochs pile_paper
    1.83e+10 s3://bucket/pile-megatron/train-Pile_CC-00000-of-00213 ...

One weight and one path prefix per .bin/.idx pair of the manifest. The weight is the pair's token
count, so Megatron's blend samples every document alike; with `--epochs` (an output written with
--per_subset), times its subset's epochs: `pile_paper` gives the Pile paper's mixture (Table 1) at
train time without writing copies. Megatron and NeMo normalize the weights.

On a file system the prefixes go through `OUT/latest`, the link a run points at its own run
directory once its manifest is written (pipeline/io/outputs.py): a rerun of the same input and
options gives the same line, and a launch script holding it reads the latest complete output. On
an object store (no links) the prefixes name the run directory.
"""

from __future__ import annotations

import sys

from pipeline.core.options import ArgumentParser, UsageError
from pipeline.core.subsets import EPOCH_PRESETS, parse_epochs
from pipeline.format import megatron
from pipeline.format.manifest import ManifestError
from pipeline.io.outputs import LATEST_NAME, latest_run


def data_path_line(output_dir: str, epochs: str | None = None, style: str = "megatron") -> str:
    """The line for an output directory (local or URL); `epochs` as --epochs takes it."""
    manifest = megatron.load_manifest(output_dir)
    if not manifest["shards"]:
        raise ManifestError(f"{output_dir} holds no documents")
    weights = dict(parse_epochs(epochs)) if epochs else None
    if epochs and epochs not in EPOCH_PRESETS:
        # A misspelt name would silently keep weight 1: every name given must be a subset of the output.
        unknown = sorted(set(weights) - {shard["subset"] for shard in manifest["shards"]})
        if unknown:
            raise ValueError(f"--epochs names {unknown}, which this output has no shards of")
    pairs = megatron.blend(manifest, weights)
    if latest_run(output_dir) == manifest["run_id"]:
        pairs = megatron.via_link(pairs, manifest["run_id"], LATEST_NAME)
    return megatron.data_path(pairs, megatron.prefix_root(output_dir), style)


def build_parser() -> ArgumentParser:
    """The command's flags."""
    parser = ArgumentParser(prog="pile-pipeline data-path", description=__doc__)
    parser.add_argument("output_dir", help="the output directory of a run with --output_format megatron")
    parser.add_argument("--epochs", metavar="SPEC",
                        help="per-subset epochs as weights: 'pile_paper' or 'Name=2,Other=1.5' (an output written "
                        "with --per_subset) (default: none, token counts alone)")
    parser.add_argument("--style", choices=("megatron", "nemo"), default="megatron",
                        help="megatron: `W1 P1 W2 P2 ...` for --data-path; nemo: `[W1,P1,...]` for data_prefix "
                        "(default: megatron)")
    return parser


def cli(argv: list[str] | None = None) -> int:
    """Print the line; exit status 2 with one line for a mistake."""
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        print(data_path_line(args.output_dir, args.epochs, args.style))
    except (UsageError, ValueError, ManifestError) as e:
        print(f"pile-pipeline data-path: {e}", file=sys.stderr)
        return 2
    return 0
