"""`pile-pipeline show OUTPUT_DIR --tokenizer_model M`: what a pipeline output holds.

Prints the manifest's summary, then reads the first batch through the training reader
(`pipeline.tfdata.make_dataset`) and detokenizes its first sequence, so a user sees the exact
text a model will be trained on.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import sentencepiece as spm

from pipeline.core.options import ArgumentParser, UsageError
from pipeline.format.manifest import ManifestError, load_manifest
from pipeline.format.summary import format_summary


def show(output_dir: str, tokenizer_model: str, batch_size: int = 2, chars: int = 600) -> str:
    """The summary and the first batch, as text."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline.reader.dataset import make_dataset  # TensorFlow loads only here

    manifest = load_manifest(output_dir)
    lines = [format_summary(manifest), ""]
    batch = next(iter(make_dataset(output_dir, batch_size, seed=0)))
    inputs = batch["inputs"].numpy()
    lines.append("first batch: " + ", ".join(f"{k} {tuple(v.shape)} {v.dtype.name}" for k, v in batch.items()))
    sp = spm.SentencePieceProcessor(model_file=tokenizer_model)
    eos = manifest["tokenizer"]["eos_id"]
    ids = inputs[0].tolist()
    # Show document boundaries: decode each document separately, joined by a visible marker.
    pieces, current = [], []
    for token in ids:
        if token == eos:
            pieces.append(sp.decode(current))
            current = []
        else:
            current.append(token)
    pieces.append(sp.decode(current))
    text = " ⟨EOS⟩ ".join(pieces)
    lines.append(f"sequence 0 detokenized ({len(ids)} tokens, {int(np.sum(np.array(ids) == eos))} EOS):")
    lines.append(text[:chars] + (" ..." if len(text) > chars else ""))
    return "\n".join(lines)


def main(argv=None) -> None:
    """Parse the flags and print `show`."""
    p = ArgumentParser(prog="pile-pipeline show", description=__doc__)
    p.add_argument("output_dir", help="the pipeline's output directory (local path or URL)")
    p.add_argument("--tokenizer_model", required=True, help="the SentencePiece model the output was made with")
    p.add_argument("--batch_size", type=int, default=2, help="batch to read (default: 2)")
    args = p.parse_args(argv)
    print(show(args.output_dir, args.tokenizer_model, args.batch_size))


def cli(argv=None) -> int:
    """The command: exit status 0, or 2 with one line."""
    try:
        main(argv)
    except (UsageError, ManifestError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
