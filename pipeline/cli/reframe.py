"""`pile-pipeline reframe`: rewrite .jsonl.zst inputs once as indexed ~1 GB frames, read in parallel.

    pile-pipeline reframe 's3://my-bucket/pile/train/*.jsonl.zst'          # in place
    pile-pipeline reframe 'pile/train/*.jsonl.zst' --out_dir pile-framed/train

The content of every file stays byte for byte the same (pipeline/io/frames.py says how), so a job
gives the same output bytes from the rewritten files as from the originals; it only reads them one
frame per work item. The index is made for one --chunk_mb and --max_line_mb (the job's defaults
unless given): a job run with others reads the file from its start, as before.

Each file is read twice and the result once more (to check it), one file at a time; run several
copies of this command on different files to use more cores (e.g. `ls ... | xargs -P 8 -n 1
pile-pipeline reframe`). A file is replaced only once complete (pipeline/io/publish.py); on s3://
the new file is staged on local disk first (~its compressed size).

Exit status: 0 when every file is rewritten; 2, with one line, for a mistake found before a file is
written (a flag, no file matching, a file that is not .zst or has no lines); 1, with one line
naming the file, when rewriting one fails (a damaged input, a full disk).
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import sys
import time

from pipeline.config.job import PipelineConfig
from pipeline.core.errors import JobError
from pipeline.core.options import ArgumentParser, UsageError
from pipeline.io.frames import reframe
from pipeline.io.inputs import InputError, expand_inputs
from pipeline.io.urls import redact_url

MB = 1 << 20


def _job_default(name: str) -> float:
    """A `pile-pipeline run` option's default: the index is made for the job's chunking."""
    return next(f.default for f in dataclasses.fields(PipelineConfig) if f.name == name)


def build_parser() -> ArgumentParser:
    """The command's flags."""
    parser = ArgumentParser(prog="pile-pipeline reframe", description=__doc__)
    parser.add_argument("inputs", nargs="+", help="globs or URLs of .jsonl.zst files (required)")
    parser.add_argument("--out_dir", help="write here (same file names) instead of replacing the inputs "
                        "(default: none, in place)")
    parser.add_argument("--chunk_mb", type=float, default=_job_default("chunk_mb"),
                        help=f"the job's --chunk_mb (default: {_job_default('chunk_mb')})")
    parser.add_argument("--max_line_mb", type=float, default=_job_default("max_line_mb"),
                        help=f"the job's --max_line_mb (default: {_job_default('max_line_mb')})")
    parser.add_argument("--frame_mb", type=float, default=1024,
                        help="decompressed MiB per frame, at least (default: 1024)")
    parser.add_argument("--level", type=int, default=3, help="zstd level of the new frames (default: 3)")
    return parser


def reframe_all(argv: list[str]) -> None:
    """Reframe every file matched by the patterns, one after the other."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for path in expand_inputs(args.inputs):
        dest = posixpath.join(args.out_dir, posixpath.basename(path)) if args.out_dir else path
        start = time.monotonic()
        frames = reframe(path, dest, int(args.chunk_mb * MB), int(args.max_line_mb * MB), int(args.frame_mb * MB),
                         args.level)
        logging.info("%s -> %s: %d frames, %.1f MB of content in %.0f s", redact_url(path), redact_url(dest),
                     len(frames), sum(f.length for f in frames) / 1e6, time.monotonic() - start)


def cli(argv: list[str] | None = None) -> int:
    """Run the command; its exit status (see the module docstring)."""
    try:
        reframe_all(sys.argv[1:] if argv is None else argv)
    except (UsageError, InputError, ValueError) as e:
        print(f"pile-pipeline reframe: {e}", file=sys.stderr)
        return 2
    except (JobError, OSError) as e:
        print(f"pile-pipeline reframe: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
