"""Rewrite .jsonl.zst inputs once as indexed ~1 GB frames, so that a job reads each file in parallel.

    python scripts/reframe_inputs.py 's3://my-bucket/pile/train/*.jsonl.zst'          # in place
    python scripts/reframe_inputs.py 'pile/train/*.jsonl.zst' --out_dir pile-framed/train

The content of every file stays byte for byte the same (pipeline/io/frames.py says how), so a job
gives the same output bytes from the rewritten files as from the originals; it only reads them one
frame per work item. The index is made for one --chunk_mb and --max_line_mb (the job's defaults
unless given): a job run with others reads the file from its start, as before.

Each file is read twice and the result once more (to check it), one file at a time; run several
copies of this script on different files to use more cores (e.g. `ls ... | xargs -P 8 -n 1 python
scripts/reframe_inputs.py`). A file is replaced only once complete (pipeline/io/publish.py); on
s3:// the new file is staged on local disk first (~its compressed size).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import posixpath
import time

from pipeline.config.job import PipelineConfig
from pipeline.io.frames import reframe
from pipeline.io.inputs import expand_inputs
from pipeline.io.urls import redact_url

MB = 1 << 20


def _default(name: str) -> float:
    return next(f.default for f in dataclasses.fields(PipelineConfig) if f.name == name)


def main(argv: list[str] | None = None) -> None:
    """Reframe every file matched by the patterns."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="globs or URLs of .jsonl.zst files")
    parser.add_argument("--out_dir", help="write here (same file names) instead of replacing the inputs")
    parser.add_argument("--chunk_mb", type=float, default=_default("chunk_mb"), help="the job's --chunk_mb")
    parser.add_argument("--max_line_mb", type=float, default=_default("max_line_mb"), help="the job's --max_line_mb")
    parser.add_argument("--frame_mb", type=float, default=1024, help="decompressed MiB per frame (at least)")
    parser.add_argument("--level", type=int, default=3, help="zstd level of the new frames")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for path in expand_inputs(args.inputs):
        dest = posixpath.join(args.out_dir, posixpath.basename(path)) if args.out_dir else path
        start = time.monotonic()
        frames = reframe(path, dest, int(args.chunk_mb * MB), int(args.max_line_mb * MB), int(args.frame_mb * MB),
                         args.level)
        logging.info("%s -> %s: %d frames, %.1f MB of content in %.0f s", redact_url(path), redact_url(dest),
                     len(frames), sum(f.length for f in frames) / 1e6, time.monotonic() - start)


if __name__ == "__main__":
    main()
