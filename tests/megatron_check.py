"""Check a Megatron output of pile-pipeline with Megatron's own code (megatron-core), document by document.

    .venv-megatron/bin/python tests/megatron_check.py OUTPUT_DIR --input FILE.jsonl ... \
        --tokenizer_model M.model [--text_key body --subset_key source.name] [--seq_length 64] \
        [--samples 2000] [--json REPORT.json]

Runs in the Megatron environment (scripts/setup_megatron_env.sh: megatron-core on a CPU build of
torch), not in ours: it imports nothing from this repository, so what it checks is what Megatron
reads. The expected documents come from the input itself: each JSON line in input order, kept by
the rules the manifest records (selected subsets, non-empty text, at least one token), encoded by
SentencePiece, with BOS/EOS as the manifest's tokenizer entry says; with `per_subset` the
documents of each subset form their own group of shards.

1. `IndexedDataset` (megatron.core.datasets.indexed_dataset) on every prefix of the manifest:
   dtype, sequence and document counts, and every document's tokens equal the expected ones, in order.
2. Megatron's `IndexedDatasetBuilder`, given the expected documents of each shard, writes the same
   .bin and .idx bytes as ours (the writer `preprocess_data.py` uses).
3. `GPTDataset`s over the manifest's blend (`BlendedMegatronDatasetBuilder`, the weights of our
   --data-path line): every sample of each dataset equals the expected documents cut at Megatron's
   own sample index (after its shuffle), with EOS resetting position ids and masking the loss when
   asked; each draw of the blend is one of those samples, and each prefix is drawn as often as
   its weight says.

Outputs written with --epochs are not supported here (their copies are drawn by a hash of ours).
Prints a JSON summary; exit status 1 on the first difference, naming it.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import sentencepiece as spm

warnings.filterwarnings("ignore")  # megatron-core warns about missing GPU libraries on import
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import torch  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: E402
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder  # noqa: E402
from megatron.core.datasets.utils import get_blend_from_list  # noqa: E402
from megatron.core.tokenizers import MegatronTokenizer  # noqa: E402


class Mismatch(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def read_lines(path: str):
    if path.endswith(".zst"):
        import zstandard

        with open(path, "rb") as f:
            stream = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f))
            yield from stream
    elif path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            yield from f
    else:
        with open(path, "rb") as f:
            yield from f


def at(obj, path: str):
    """The value at a dotted path of a JSON object (KeyError/TypeError when it has none)."""
    for key in path.split("."):
        obj = obj[key]
    return obj


def subset_of(obj, path: str, default: str | None):
    """The subset name at `path`, or `default` for a missing, null or empty one (as the job reads it)."""
    try:
        value = at(obj, path)
    except (KeyError, TypeError):
        value = None
    if value is None or value == "":
        if default is None:
            raise KeyError(path)
        return default
    return value


def expected_documents(inputs: list[str], manifest: dict, model: str, text_key: str,
                       subset_key: str) -> dict[str | None, list[np.ndarray]]:
    """The documents each group of shards must hold, in order, from the input alone."""
    config, tok = manifest["config"], manifest["tokenizer"]
    check(not config.get("epochs"), "outputs written with --epochs are not supported by this check")
    every = config["subsets"] == ["*"]
    selected, excluded = set(config["subsets"]), set(config.get("exclude_subsets") or ())
    default = config.get("default_subset")
    sp = spm.SentencePieceProcessor(model_file=model)
    groups: dict[str | None, list[np.ndarray]] = {}
    for path in inputs:  # in the pipeline's input order: sorted paths
        for raw in read_lines(path):
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            try:
                obj = json.loads(raw.decode("utf-8"))
                text, subset = at(obj, text_key), subset_of(obj, subset_key, default)
            except (ValueError, KeyError, TypeError):
                continue  # a dead letter of ours; the test checks those separately
            if (not isinstance(text, str) or not (every or subset in selected) or subset in excluded
                    or not text.strip()):
                continue
            ids = sp.encode(text)
            if not ids:
                continue
            doc = [tok["bos_id"]] * tok["add_bos"] + ids + [tok["eos_id"]] * tok["add_eos"]
            groups.setdefault(subset if manifest["megatron"]["per_subset"] else None, []).append(np.array(doc))
    return groups


def check_indexed(root: str, manifest: dict, expected: dict) -> dict[str, list[np.ndarray]]:
    """Step 1 and 2; returns the expected documents of each prefix."""
    by_prefix: dict[str, list[np.ndarray]] = {}
    position: dict[str | None, int] = {}
    dtype = DType.optimal_dtype(manifest["tokenizer"]["vocab_size"])
    check(np.dtype(dtype).name == manifest["megatron"]["dtype"], f"dtype {manifest['megatron']['dtype']} != {dtype}")
    with tempfile.TemporaryDirectory() as tmp:
        for shard in manifest["shards"]:  # sorted by path: within a group, in shard order
            prefix = os.path.join(root, shard["path"])
            group = shard["subset"]
            start = position.get(group, 0)
            want = expected.get(group, [])[start : start + shard["documents"]]
            position[group] = start + shard["documents"]
            ds = IndexedDataset(prefix)
            check(ds.index.dtype == dtype, f"{prefix}: dtype {ds.index.dtype}, expected {dtype}")
            check(len(ds) == shard["documents"] == len(want), f"{prefix}: {len(ds)} sequences, manifest "
                  f"{shard['documents']}, expected {len(want)}")
            check(np.array_equal(ds.document_indices, np.arange(len(ds) + 1)), f"{prefix}: document indices")
            for i, doc in enumerate(want):
                got = ds[i]
                check(np.array_equal(got, doc), f"{prefix}: document {i} differs: {got[:12]}... vs {doc[:12]}...")
            # Megatron's own writer, given the same documents, writes the same bytes.
            builder = IndexedDatasetBuilder(os.path.join(tmp, "m.bin"), dtype=dtype)
            for doc in want:
                builder.add_document(torch.from_numpy(doc), [len(doc)])
            builder.finalize(os.path.join(tmp, "m.idx"))
            for suffix in ("bin", "idx"):
                with open(os.path.join(tmp, f"m.{suffix}"), "rb") as a, open(f"{prefix}.{suffix}", "rb") as b:
                    check(a.read() == b.read(), f"{prefix}.{suffix} differs from IndexedDatasetBuilder's")
            by_prefix[prefix] = want
    for group, docs in expected.items():
        check(position.get(group, 0) == len(docs), f"group {group}: {position.get(group, 0)} documents written, "
              f"{len(docs)} expected")
    return by_prefix


def sample_text(ds: GPTDataset, docs: list[np.ndarray], idx: int, pad: int) -> np.ndarray:
    """What sample idx must hold: the expected documents cut at Megatron's own indices."""
    j = ds.shuffle_index[idx]
    (d0, o0), (d1, o1) = ds.sample_index[j], ds.sample_index[j + 1]
    extra = ds.config.add_extra_token_to_sequence
    if d0 == d1:
        parts = [docs[ds.document_index[d0]][o0 : o1 + extra]]
    else:
        parts = [docs[ds.document_index[d0]][o0:]]
        parts += [docs[ds.document_index[d]] for d in range(d0 + 1, d1)]
        parts.append(docs[ds.document_index[d1]][: o1 + extra])
    text = np.concatenate(parts)
    want = ds.config.sequence_length + extra
    return np.concatenate([text, np.full(want - len(text), pad, text.dtype)])


def check_gpt(root: str, manifest: dict, by_prefix: dict, model: str, seq_length: int, samples: int) -> dict:
    """Step 3."""
    tokenizer = MegatronTokenizer.from_pretrained(tokenizer_path=model, metadata_path={"library": "sentencepiece"})
    eod = manifest["tokenizer"]["eos_id"]
    check(tokenizer.eod == eod, f"Megatron's tokenizer says eod {tokenizer.eod}, the manifest {eod}")
    blend = get_blend_from_list(manifest["megatron"]["data_path"].split())
    blend = ([os.path.join(root, p) for p in blend[0]], blend[1])
    config = GPTDatasetConfig(
        random_seed=1234, sequence_length=seq_length, blend=blend, split="100,0,0",
        tokenizer=tokenizer, reset_position_ids=True, reset_attention_mask=False, eod_mask_loss=True,
        create_attention_mask=False,  # a dense mask per sample: most of the time, nothing about our files
        mid_level_dataset_surplus=0.5,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
    datasets = train.datasets if hasattr(train, "datasets") else [train]
    checked = 0
    for ds in datasets:
        docs = by_prefix[ds.dataset_path]
        for idx in range(len(ds)):
            text = sample_text(ds, docs, idx, ds._pad_token_id)  # noqa: SLF001 -- the pad GPTDataset uses
            item = ds[idx]
            tokens = item["tokens"].numpy()
            check(np.array_equal(tokens, text[:-1]) and np.array_equal(item["labels"].numpy(), text[1:]),
                  f"{ds.dataset_path} sample {idx} differs from the expected documents")
            # Document boundaries are usable: positions restart after each EOS, and its loss is masked.
            ends = np.flatnonzero(tokens[:-1] == eod)
            positions = item["position_ids"].numpy()
            check(all(positions[e + 1] == 0 for e in ends), f"{ds.dataset_path} sample {idx}: positions not reset")
            check(all(item["loss_mask"].numpy()[tokens == eod] == 0), f"{ds.dataset_path} sample {idx}: EOD loss")
            checked += 1
    draws = {}
    if len(datasets) > 1:
        for k in range(len(train)):
            d, s = int(train.dataset_index[k]), int(train.dataset_sample_index[k])
            check(np.array_equal(train[k]["tokens"].numpy(), datasets[d][s]["tokens"].numpy()), f"blend draw {k}")
            draws[datasets[d].dataset_path] = draws.get(datasets[d].dataset_path, 0) + 1
        # Megatron's blend picks the dataset furthest behind its weight at every draw: counts follow weights.
        weights = np.array(blend[1]) / sum(blend[1])
        for ds, weight in zip(datasets, weights, strict=True):
            got = draws.get(ds.dataset_path, 0)
            check(abs(got - weight * len(train)) <= 2, f"{ds.dataset_path}: {got} draws for weight {weight:.4f}")
    return {"gpt_samples_checked": checked, "blend_draws": draws, "datasets": len(datasets), "blended": len(train)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output_dir")
    p.add_argument("--input", nargs="+", required=True, help="the job's input files, in its (sorted) order")
    p.add_argument("--tokenizer_model", required=True)
    p.add_argument("--text_key", help="the text's key, a dotted path (default: the manifest's, else text)")
    p.add_argument("--subset_key", help="the subset name's key (default: the manifest's, else meta.pile_set_name)")
    p.add_argument("--seq_length", type=int, default=64)
    p.add_argument("--samples", type=int, default=2000, help="samples drawn from the blend")
    p.add_argument("--json", help="also write the summary here")
    args = p.parse_args()
    with open(os.path.join(args.output_dir, "manifest.json")) as f:
        manifest = json.load(f)
    try:
        check(manifest["format"] == "pile-megatron-indexed", f"format {manifest['format']}")
        config = manifest["config"]
        text_key = args.text_key or config.get("text_key", "text")
        subset_key = args.subset_key or config.get("subset_key", "meta.pile_set_name")
        expected = expected_documents(sorted(args.input), manifest, args.tokenizer_model, text_key, subset_key)
        by_prefix = check_indexed(args.output_dir, manifest, expected)
        gpt = check_gpt(args.output_dir, manifest, by_prefix, args.tokenizer_model, args.seq_length, args.samples)
    except Mismatch as e:
        print(f"MISMATCH: {e}", file=sys.stderr)
        return 1
    summary = {"prefixes": len(by_prefix), "documents": sum(len(d) for d in by_prefix.values()),
               "tokens": int(sum(len(x) for d in by_prefix.values() for x in d)), **gpt}
    print(json.dumps(summary, sort_keys=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
