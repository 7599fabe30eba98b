r"""The tokenizer sample's rules: document keys, per-stratum budgets, what is kept; the sample's files.

Sampling (the Beam job is pipeline/beam/sample.py; the same reader, parser and dead-letter reasons as
`pipeline.run`):

    (file_index, path) -> ReadChunks -> Chunk -> FanOut (Reshuffle)
    Chunk              -> KeyDocuments -> (stratum, SampleDoc) + stats      bad lines counted, skipped
    (stratum, docs)    -> SmallestKeys  -> (stratum, [SampleDoc])            per stratum, bounded memory
    [(stratum, docs)]  -> WriteSample   -> sample.jsonl (key order) + sample_stats.json

Every document gets a key: `stable_hash("tokenizer-sample", seed, file, line)` (pipeline/core/hashing.py).
A stratum (a subset; everything at once for `--weights natural`) keeps its documents with the
smallest keys until their bytes reach its budget: `sample_bytes * weight / sum(weights)`. Worked
example, budget 10 bytes, documents as (key, bytes): (7, 4) (2, 5) (9, 1) (4, 6) -> by key
(2, 5) (4, 6) | (7, 4) (9, 1): the first two are kept (5 < 10 before the second; 11 >= 10 after it),
so a stratum overshoots its budget by less than one document. The kept set depends only on the keys,
never on how the runner split or ordered the work, so the sample is byte-identical on every run,
runner and worker count; the accumulators merge associatively and hold at most ~2x the budget.

A stratum with less text than its budget contributes everything it has; the shortfall is not handed
to other subsets (the card marks it `short`). Documents are cut to `--max_doc_chars` before they are

The sample's options are pipeline/config/tokenizer.py's `SampleConfig`; the trainer that learns
from the sample, pipeline/tokenize/trainer.py.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator

import fsspec

from pipeline.core.hashing import stable_hash
from pipeline.core.subsets import check_subset_names, pile_mix_weights
from pipeline.io.files import sha256_of

SAMPLE_FILE = "sample.jsonl"
SAMPLE_STATS_FILE = "sample_stats.json"
NATURAL_STRATUM = "*"  # the one stratum of `--weights natural`
WEIGHT_PRESETS = ("pile", "natural", "uniform")


def parse_weights(value: str | None, subsets: Iterable[str], any_names: bool = False) -> dict[str, float] | None:
    """`--weights`: 'pile' (default), 'uniform', 'natural' (None: one stratum) or 'Name=w,Other=w'.

    Returns the normalized weight of each selected subset (summing to 1). In an explicit list, the
    selected subsets that are not named get weight 0 (left out of the sample).
    """
    chosen = list(subsets)
    value = (value or "pile").strip()
    if value == "natural":
        return None
    if value == "pile":
        unknown = [name for name in chosen if name not in pile_mix_weights()]
        if unknown:
            raise ValueError(f"--weights pile has no weight for {', '.join(unknown)}: give --weights uniform, "
                             "natural or NAME=W,...")
        raw = {name: pile_mix_weights()[name] for name in chosen}
    elif value == "uniform":
        raw = dict.fromkeys(chosen, 1.0)
    else:
        raw = dict.fromkeys(chosen, 0.0)
        for item in value.split(","):
            name, sep, number = item.rpartition("=")
            if not sep:
                raise ValueError(
                    f"--weights: {item!r} is not NAME=WEIGHT (or use a preset: {', '.join(WEIGHT_PRESETS)})"
                )
            name = name.strip()
            check_subset_names([name], "--weights", any_names)
            if name not in raw:
                raise ValueError(f"--weights: {name!r} is not among the selected subsets (see --subsets)")
            try:
                raw[name] = float(number)
            except ValueError:
                raise ValueError(f"--weights: {item!r}: {number!r} is not a number") from None
            if raw[name] < 0:
                raise ValueError(f"--weights: {name}={raw[name]} must be >= 0")
    total = sum(raw.values())
    if total <= 0:
        raise ValueError("--weights: every selected subset has weight 0; nothing would be sampled")
    return {name: w / total for name, w in raw.items()}



def document_key(seed: int, file_index: int, line: int) -> int:
    """The document's sampling key: a hash of (seed, file, line), the same on every run and worker."""
    return stable_hash("tokenizer-sample", seed, file_index, line)


# A sampled document: (key, file_index, line, utf8_bytes, subset, text). Tuples sort by key; the
# (file_index, line) pair that follows makes the order total even in the (2^-64) event of a key tie.
SampleDoc = tuple[int, int, int, int, str, str]


def take_smallest(docs: Iterable[SampleDoc], budget: int) -> list[SampleDoc]:
    """The documents with the smallest keys, in key order, until their bytes reach `budget`.

    A document is kept when the bytes kept before it are below the budget, so the result exceeds
    the budget by less than one document. For any split of the input into parts,
    `take_smallest(concat(take_smallest(part) for part in parts))` equals `take_smallest(all)`:
    that is what lets Beam combine partial results in any order.
    """
    kept: list[SampleDoc] = []
    size = 0
    for doc in sorted(docs):
        if size >= budget:
            break
        kept.append(doc)
        size += doc[3]
    return kept



def load_sample_stats(work_dir: str) -> dict:
    """Read WORK_DIR/sample_stats.json and check that sample.jsonl beside it is the one it describes."""
    stats_path = posixpath.join(work_dir, SAMPLE_STATS_FILE)
    sample_path = posixpath.join(work_dir, SAMPLE_FILE)
    fs, fs_path = fsspec.core.url_to_fs(stats_path)
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"No {SAMPLE_STATS_FILE} in {work_dir}: draw the sample first (--sample_only)")
    with fs.open(fs_path, "r", encoding="utf-8") as f:
        stats = json.load(f)
    actual = sha256_of(sample_path)
    if actual != stats["sha256"]:
        raise ValueError(
            f"{sample_path}: sha256 {actual} does not match {SAMPLE_STATS_FILE} ({stats['sha256']}); "
            "the sample was changed or cut short. Draw it again."
        )
    return stats


def iter_sample(work_dir: str) -> Iterator[tuple[str, str]]:
    """(subset, text) of each sampled document, in the sample's order."""
    with fsspec.open(posixpath.join(work_dir, SAMPLE_FILE), "rb") as f:
        for line in f:
            obj = json.loads(line)
            yield obj["subset"], obj["text"]
