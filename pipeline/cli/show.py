"""`pile-pipeline show OUTPUT_DIR [--tokenizer_model M]`: what a pipeline output holds.

Prints the manifest's summary, then reads the first batch through the training reader
(`pipeline.tfdata.make_dataset`) and detokenizes its first sequence, so a user sees the exact
text a model will be trained on.

The tokenizer is the one the manifest records (its path in the job's config), when that path is
reachable from here and its sha256 is the manifest's. A model given with --tokenizer_model must
have the manifest's sha256: ids decoded with another model are not the text that was tokenized.
Without a usable model the first ids are shown instead.
"""

from __future__ import annotations

import os
import posixpath
import sys

import fsspec
import numpy as np

from pipeline.core.extras import missing_extra
from pipeline.core.options import ArgumentParser, UsageError, parse_bool
from pipeline.format import megatron
from pipeline.format.buckets import BUCKETS_NAME
from pipeline.format.manifest import MANIFEST_NAME, MIXTURE_NAME, ManifestError, OtherFormat, load_manifest
from pipeline.format.mixture import format_mixture, is_mixture, load_mixture
from pipeline.format.summary import format_summary
from pipeline.io.files import sha256_of
from pipeline.io.outputs import LATEST_NAME, latest_run
from pipeline.io.urls import redact_url
from pipeline.startup.native_stderr import quiet_native_notices

IDS_SHOWN = 64


def tokenizer_sha256(path: str) -> str:
    """The sha256 the manifest records for a tokenizer: of the file, or of a directory's tokenizer.json."""
    from pipeline.tokenize.kinds.detect import is_dir  # only when there is a tokenizer to look at

    return sha256_of(path.rstrip("/") + "/tokenizer.json" if is_dir(path) else path)


def choose_tokenizer(manifest: dict, given: str | None) -> tuple[str | None, str]:
    """(the model to detokenize with, or None; a line saying which and why).

    Raises UsageError when a given model is missing or is not the one the output was made with.
    """
    expected = manifest["tokenizer"]["sha256"]
    recorded = manifest.get("config", {}).get("tokenizer_model")
    if given:
        try:
            actual = tokenizer_sha256(given)
        except FileNotFoundError:
            raise UsageError(f"--tokenizer_model: no such file {redact_url(given)}") from None
        if actual != expected:
            raise UsageError(
                f"--tokenizer_model {redact_url(given)}: sha256 {actual[:16]}... is not the manifest's "
                f"{expected[:16]}... (the output was tokenized with {recorded or manifest['tokenizer']['model']}); "
                "give that model, or leave the flag out to use it when it is reachable")
        return given, f"tokenizer: {redact_url(given)} (sha256 matches the manifest)"
    if not recorded:
        return None, "tokenizer: the manifest records no model path; pass --tokenizer_model to detokenize"
    try:
        actual = tokenizer_sha256(recorded)
    except (OSError, ValueError, ImportError) as e:
        return None, (f"tokenizer: the recorded model {redact_url(recorded)} is not reachable from here "
                      f"({type(e).__name__}); pass --tokenizer_model to detokenize")
    if actual != expected:
        return None, (f"tokenizer: the model at {redact_url(recorded)} has changed since the output was made "
                      "(sha256 differs); pass the original with --tokenizer_model to detokenize")
    return recorded, f"tokenizer: {redact_url(recorded)}, from the manifest (sha256 matches)"


def _detokenized(ids: list[int], model: str, eos: int, tiktoken_name: str | None = None) -> str:
    from pipeline.tokenize.kinds.detect import load_tokenizer  # only when there is a model to decode with

    sp = load_tokenizer(model, tiktoken_name=tiktoken_name)  # any kind: SentencePiece, tokenizer.json, tiktoken
    # Show document boundaries: decode each document separately, joined by a visible marker.
    pieces, current = [], []
    for token in ids:
        if token == eos:
            pieces.append(sp.decode(current))
            current = []
        else:
            current.append(token)
    pieces.append(sp.decode(current))
    return " ⟨EOS⟩ ".join(pieces)


def _mixture_file(path: str) -> str | None:
    """The mixture.json that `path` names, or that an output directory without a manifest holds (--per_subset)."""
    if is_mixture(path):
        return path
    candidate = posixpath.join(path.rstrip("/"), MIXTURE_NAME)
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(posixpath.join(root, MANIFEST_NAME)) and fs.exists(posixpath.join(root, MIXTURE_NAME)):
        return candidate
    return None


def show(output_dir: str, tokenizer_model: str | None = None, batch_size: int = 2, chars: int = 600,
         summary: bool = True) -> str:
    """The summary (unless `summary` is false) and the first batch, as text; a mixture's table for a mixture."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if posixpath.basename(output_dir.rstrip("/")) == BUCKETS_NAME:
        out = redact_url(posixpath.dirname(output_dir.rstrip("/")) or ".")
        raise UsageError(f"{redact_url(output_dir)} is a --split_by run's record, not an output: pass {out} (its "
                         f"buckets' mixture) or one bucket's directory; `pile-pipeline report {out}` shows its counts")
    mixture_file = _mixture_file(output_dir)
    if mixture_file:
        mixture = load_mixture(mixture_file)
        manifests = {s.name: load_manifest(s.manifest) for s in mixture.sources}
        return format_mixture(mixture, manifests, redact_url(mixture_file))
    try:
        manifest = load_manifest(output_dir)
    except OtherFormat as e:
        if e.found != megatron.FORMAT:
            raise
        return _show_megatron(output_dir, tokenizer_model, chars, summary)
    records = sum(int(shard["records"]) for shard in manifest["shards"])
    if not 1 <= batch_size <= records:
        raise UsageError(f"--batch_size {batch_size}: the output holds {records} records; give --batch_size "
                         f"between 1 and {records}")
    model, note = choose_tokenizer(manifest, tokenizer_model)
    with quiet_native_notices():
        from pipeline.reader.dataset import make_dataset  # TensorFlow loads only here

        batch = next(iter(make_dataset(output_dir, batch_size, seed=0)))
    lines = [format_summary(manifest), "", note] if summary else [note]
    inputs = batch["inputs"].numpy()
    lines.append("first batch: " + ", ".join(f"{k} {tuple(v.shape)} {v.dtype.name}" for k, v in batch.items()))
    ids = inputs[0].tolist()
    count = f"{len(ids)} tokens, {int(np.sum(np.array(ids) == manifest['tokenizer']['eos_id']))} EOS"
    return "\n".join(lines + _shown_ids(ids, model, manifest["tokenizer"], "sequence 0", count, chars))


def _shown_ids(ids: list[int], model: str | None, tokenizer: dict, what: str, count: str, chars: int) -> list[str]:
    """Lines showing `ids`: detokenized with `model`, or the first ids without one (or without its package)."""
    text, lines = None, []
    if model is not None:
        try:
            text = _detokenized(ids, model, tokenizer["eos_id"], tokenizer.get("tiktoken_encoding"))
        except ImportError as e:
            if not missing_extra(e):
                raise
            lines.append(f"not detokenized: {missing_extra(e)}")
    if text is None:
        return [*lines, f"{what} ({count}), first {IDS_SHOWN} ids: {ids[:IDS_SHOWN]}"]
    return [f"{what} detokenized ({count}):", text[:chars] + (" ..." if len(text) > chars else "")]


def _show_megatron(output_dir: str, tokenizer_model: str | None, chars: int, summary: bool) -> str:
    """A Megatron output: its summary (with the --data-path line) and its first document, detokenized."""
    manifest = megatron.load_manifest(output_dir)
    model, note = choose_tokenizer(manifest, tokenizer_model)
    link = LATEST_NAME if latest_run(output_dir) == manifest["run_id"] else None
    lines = [megatron.format_summary(manifest, root=megatron.prefix_root(output_dir), link=link), ""] if summary else []
    lines.append(note)
    if not manifest["shards"]:
        return "\n".join([*lines, "no documents"])
    shard = manifest["shards"][0]
    ids = megatron.read_document(output_dir, shard, 0).tolist()
    what = f"document 0 of {posixpath.basename(shard['path'])}"
    return "\n".join(lines + _shown_ids(ids, model, manifest["tokenizer"], what, f"{len(ids)} tokens", chars))


def build_parser() -> ArgumentParser:
    """The command's flags."""
    p = ArgumentParser(prog="pile-pipeline show", description=__doc__)
    p.add_argument("output_dir", help="the pipeline's output directory (local path or URL), or a mixture.json "
                   "(or a --per_subset output's directory): its sources and weights (required)")
    p.add_argument("--tokenizer_model", metavar="FILE", default=None,
                   help="the tokenizer the output was made with (any kind: .model, tokenizer.json or its directory, "
                   "tiktoken file), checked against the manifest's sha256 (default: the model the manifest records, "
                   "when reachable)")
    p.add_argument("--batch_size", type=int, default=2, help="batch to read (default: 2)")
    p.add_argument("--summary", type=parse_bool, default=True, metavar="BOOL",
                   help="print the manifest's summary first; false after `run`, which printed it (default: true)")
    return p


def main(argv=None) -> None:
    """Parse the flags and print `show`."""
    args = build_parser().parse_args(argv)
    print(show(args.output_dir, args.tokenizer_model, args.batch_size, summary=args.summary))


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
