"""Megatron's indexed dataset (`.bin` + `.idx`), as Megatron-LM's and NeMo's GPT datasets read it.

The source of truth is Megatron-LM's `megatron/core/datasets/indexed_dataset.py`. A dataset is a
path prefix P with two files:

    P.bin   every sequence's token ids back to back, in the index's dtype, nothing else
    P.idx   b"MMIDIDX" + 2 zero bytes, u64 version (1), u8 dtype code (8 = uint16, 4 = int32),
            u64 sequence count N, u64 document-index count D,
            int32 sequence lengths [N], int64 byte pointers into P.bin [N],
            int64 document indices [D]                                    (all little-endian)

We write one sequence per document, as `tools/preprocess_data.py --append-eod` does: sequence i
is document i, its tokens `[BOS] ids EOS` (BOS with --add_bos), and the document indices are
0, 1, ..., N. `GPTDataset` packs documents into samples at load time (its own shuffle, its own
`--seq-length`), so nothing here is packed. The token dtype follows Megatron's
`DType.optimal_dtype`: uint16 below 65500 ids, else int32.

An output is many such pairs ("shards"), each at most `--shard_size_mb` of .bin + .idx (plus one
document): a shard's index is built from its own documents only, so no writer ever holds more
than one shard's index, whatever the size of the output. The manifest (format
`pile-megatron-indexed`) lists every pair with its sizes, sha256 and counts; `data_path` turns it
into Megatron's `--data-path` / NeMo's `data_prefix` (weight, prefix pairs). Importable without
Beam: this module is pure numpy.

    >>> idx = b"".join(index_parts(np.array([3, 2]), np.dtype("<u2")))
    >>> read_index(idx).pointers.tolist(), read_index(idx).document_indices.tolist()
    ([0, 6], [0, 1, 2])
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import struct
from collections.abc import Iterator

import numpy as np

from pipeline.core.subsets import PILE_SUBSETS
from pipeline.core.tables import format_table
from pipeline.format import manifest as manifest_lib

FORMAT = "pile-megatron-indexed"  # the manifest's `format`
FORMAT_VERSION = 1
HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
# Megatron's DType codes (indexed_dataset.DType); we write only uint16 and int32, as it does.
DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}
_HEAD = struct.Struct("<9sQBQQ")  # header, version, dtype code, sequence count, document-index count
# .idx bytes per document: its length (int32), pointer (int64) and document index (int64).
INDEX_BYTES_PER_DOCUMENT = 4 + 8 + 8
_BLOCK = 1 << 20  # index entries converted per step, so writing an index needs no copy of it


class BadIndex(ValueError):
    """An .idx file that is not a valid Megatron index (or does not match its .bin)."""


def token_dtype(vocab_size: int) -> np.dtype:
    """Megatron's `DType.optimal_dtype(vocab_size)`: uint16 below 65500 ids, else int32 (little-endian)."""
    return np.dtype("<u2") if vocab_size < 65500 else np.dtype("<i4")


def dtype_code(dtype: np.dtype) -> int:
    """Megatron's code of a token dtype (8 for uint16, 4 for int32)."""
    return DTYPE_CODES[np.dtype(dtype).name]


def index_parts(lengths: np.ndarray, dtype: np.dtype) -> Iterator[bytes]:
    """The bytes of the .idx of sequences with these lengths (one document each), in pieces.

    Pointers are byte offsets into the .bin: the running sum of lengths x itemsize.
    """
    lengths = np.asarray(lengths)
    n = len(lengths)
    if n and (int(lengths.min()) < 1 or int(lengths.max()) > np.iinfo(np.int32).max):
        raise ValueError("sequence lengths must be within [1, 2**31 - 1]")
    yield _HEAD.pack(HEADER, VERSION, dtype_code(dtype), n, n + 1)
    for start in range(0, n, _BLOCK):
        yield lengths[start : start + _BLOCK].astype("<i4").tobytes()
    itemsize = np.dtype(dtype).itemsize
    offset = 0
    for start in range(0, n, _BLOCK):
        sizes = lengths[start : start + _BLOCK].astype("<i8") * itemsize
        ends = np.cumsum(sizes) + offset
        yield (ends - sizes).tobytes()
        offset = int(ends[-1])
    for start in range(0, n + 1, _BLOCK):
        yield np.arange(start, min(start + _BLOCK, n + 1), dtype="<i8").tobytes()


@dataclasses.dataclass(frozen=True)
class Index:
    """A parsed .idx: dtype, and per sequence its length and byte pointer; the document indices."""

    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray

    @property
    def bin_bytes(self) -> int:
        """Size the matching .bin must have."""
        return int(self.lengths.astype(np.int64).sum()) * self.dtype.itemsize


def read_index(data: bytes) -> Index:
    """Parse and check an .idx (as Megatron's `_IndexReader` reads it, with its asserts and ours)."""
    if len(data) < _HEAD.size:
        raise BadIndex(f"an .idx has at least {_HEAD.size} bytes, got {len(data)}")
    header, version, code, n, d = _HEAD.unpack_from(data)
    if header != HEADER or version != VERSION:
        raise BadIndex(f"not a Megatron index (header {header!r}, version {version})")
    names = {v: k for k, v in DTYPE_CODES.items()}
    if code not in names:
        raise BadIndex(f"unknown dtype code {code}")
    if len(data) != _HEAD.size + 4 * n + 8 * n + 8 * d:
        raise BadIndex(f"{len(data)} bytes do not hold {n} sequences and {d} document indices")
    lengths = np.frombuffer(data, "<i4", n, _HEAD.size)
    pointers = np.frombuffer(data, "<i8", n, _HEAD.size + 4 * n)
    documents = np.frombuffer(data, "<i8", d, _HEAD.size + 12 * n)
    dtype = np.dtype(names[code]).newbyteorder("<")
    expected = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * dtype.itemsize)[:-1]]) if n else pointers
    if not np.array_equal(pointers, expected) or (d and (documents[0] != 0 or documents[-1] != n)):
        raise BadIndex("pointers or document indices are inconsistent with the lengths")
    return Index(dtype, lengths, pointers, documents)


def subset_slug(name: str) -> str:
    """A subset's name as it appears in file names: `Gutenberg (PG-19)` -> `Gutenberg_PG_19`."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def group_names(per_subset: bool) -> list[str | None]:
    """The subset of each group of shards: one group per Pile subset, or one group (None) for all."""
    return list(PILE_SUBSETS) if per_subset else [None]


def prefix_name(split: str, subset: str | None, index: int, count: int) -> str:
    """A shard's path prefix: `train-00000-of-00004`, or `train-Pile_CC-00000-of-00002` per subset."""
    middle = f"-{subset_slug(subset)}" if subset else ""
    return f"{split}{middle}-{index:05d}-of-{count:05d}"


# A source (group, epoch copy, input file, chunk) packed into one int64, so that the layout of a
# whole corpus (one entry per source: ~200k chunks of the Pile, times subsets and copies) is three
# numpy arrays rather than millions of Python tuples.
_KEY_FIELDS = (("group", 5), ("copy", 7), ("file_index", 24), ("chunk_index", 27))


def source_key(group: int, copy: int, file_index: int, chunk_index: int) -> int:
    """One int64 for a source; keys sort as (group, copy, file, chunk) tuples do."""
    key = 0
    for (name, bits), value in zip(_KEY_FIELDS, (group, copy, file_index, chunk_index), strict=True):
        if not 0 <= value < 1 << bits:
            raise ValueError(f"{name} {value} is outside [0, {1 << bits}) in the Megatron writer's layout")
        key = (key << bits) | value
    return key


def group_of_key(key: int) -> int:
    """The group of a packed source key."""
    return key >> (63 - _KEY_FIELDS[0][1])


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each source's documents go: its first document and first byte within its group.

    Sources are in key order; bytes count each document's tokens and its index entry
    (`INDEX_BYTES_PER_DOCUMENT`), the measure shards are cut by.

    >>> a, b, c = source_key(0, 0, 0, 0), source_key(0, 0, 0, 1), source_key(1, 0, 0, 0)
    >>> layout = Layout.from_counts([np.array([[b, 2, 50], [c, 1, 9]]), np.array([[a, 3, 70]])])
    >>> layout.offsets(a), layout.offsets(b), layout.offsets(c)
    ((0, 0), (3, 70), (0, 0))
    """

    keys: np.ndarray
    first_document: np.ndarray
    first_byte: np.ndarray

    @classmethod
    def from_counts(cls, counts: list[np.ndarray]) -> Layout:
        """From [k, 3] int64 arrays of (source key, documents, bytes), in any order."""
        rows = np.concatenate([np.asarray(c, np.int64).reshape(-1, 3) for c in counts]) if counts else \
            np.zeros((0, 3), np.int64)
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        if len(rows) and (np.diff(rows[:, 0]) == 0).any():
            raise ValueError("a source was counted twice")
        keys = rows[:, 0]
        groups = keys >> (63 - _KEY_FIELDS[0][1])
        group_start = np.searchsorted(groups, groups, side="left")
        firsts = []
        for column in (1, 2):
            running = np.concatenate([[0], np.cumsum(rows[:, column])])
            firsts.append(running[:-1] - running[group_start])
        return cls(keys, firsts[0], firsts[1])

    def offsets(self, key: int) -> tuple[int, int]:
        """(first document, first byte) of a source."""
        i = int(np.searchsorted(self.keys, key))
        if i == len(self.keys) or self.keys[i] != key:
            raise KeyError(f"source {key} is not in the layout")
        return int(self.first_document[i]), int(self.first_byte[i])


def shard_slots(first_byte: int, sizes: np.ndarray, shard_bytes: int) -> np.ndarray:
    """The slot of each document: where in the group's byte stream it starts, // shard_bytes.

    A shard is the documents starting in one slot, so it holds at most shard_bytes plus one
    document. A document longer than a slot can leave the next slot without a start: such empty
    slots get no file, and the written shards are numbered densely (`dense_names`).

    >>> shard_slots(0, np.array([40, 40, 40, 200, 10]), 100).tolist()
    [0, 0, 0, 1, 3]
    """
    sizes = np.asarray(sizes, np.int64)
    starts = first_byte + np.cumsum(sizes) - sizes
    return starts // shard_bytes


def dense_names(used: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """(index, count) of each used (group, slot): the shards of a group numbered 0..count-1 in slot order.

    >>> dense_names([(0, 3), (0, 0), (1, 0)])
    {(0, 0): (0, 2), (0, 3): (1, 2), (1, 0): (0, 1)}
    """
    by_group: dict[int, list[int]] = {}
    for group, slot in sorted(set(used)):
        by_group.setdefault(group, []).append(slot)
    return {(g, s): (i, len(slots)) for g, slots in by_group.items() for i, s in enumerate(slots)}


def load_manifest(path_or_dir: str) -> dict:
    """Read and check the manifest of a Megatron output (see pipeline.format.manifest)."""
    manifest = manifest_lib.load_manifest(path_or_dir, FORMAT, FORMAT_VERSION)
    for shard in manifest["shards"]:
        for suffix in ("bin", "idx"):
            if shard[suffix]["path"] != f"{shard['path']}.{suffix}":
                raise manifest_lib.ManifestError(f"shard {shard['path']!r}: its .{suffix} is not next to it")
    return manifest


def _weight(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.12g}"


def blend(manifest: dict, epochs: dict[str, float] | None = None) -> list[tuple[float, str]]:
    """(weight, prefix) per shard: its tokens, times its subset's epochs when `epochs` is given.

    Megatron and NeMo normalize the weights, so token counts sample every document of an output
    alike; per-subset epochs reproduce a mixture such as the Pile paper's (Table 1) at train time.
    """
    if epochs:
        if not manifest["megatron"]["per_subset"]:
            raise ValueError("weights per subset need an output written with --per_subset (each of its "
                             "shards holds one subset)")
        if manifest["config"].get("epochs"):
            raise ValueError("this output already holds per-subset epochs as copies (it was written with "
                             "--epochs): its token counts are the weights; leave --epochs out here")
    return [(shard["tokens"] * (epochs or {}).get(shard["subset"], 1.0), shard["path"]) for shard in manifest["shards"]]


def prefix_root(output_dir: str) -> str:
    """The directory the prefixes of a --data-path line start with: absolute if local, else the URL."""
    if output_dir.startswith("file://"):
        output_dir = output_dir[len("file://"):]
    return output_dir.rstrip("/") if "://" in output_dir else os.path.abspath(output_dir)


def data_path(pairs: list[tuple[float, str]], root: str = "", style: str = "megatron") -> str:
    """Megatron's `--data-path` value (`W1 P1 W2 P2 ...`) or NeMo's `data_prefix` list, prefixes under `root`.

    >>> data_path([(3, "a"), (1.5, "b")], "/d")
    '3 /d/a 1.5 /d/b'
    >>> data_path([(3, "a")], "/d", style="nemo")
    '[3,/d/a]'
    """
    items = [(_weight(w), posixpath.join(root, p) if root else p) for w, p in pairs if w > 0]
    if style == "nemo":
        return "[" + ",".join(f"{w},{p}" for w, p in items) + "]"
    if style != "megatron":
        raise ValueError(f"style must be megatron or nemo, got {style!r}")
    return " ".join(f"{w} {p}" for w, p in items)


def format_summary(manifest: dict, seconds: float | None = None, root: str | None = None) -> str:
    """A plain-text summary of a Megatron output: per-subset counts, shards, and its --data-path."""
    rows = [("subset", "docs", "kept", "filtered", "tokens", "tok x epochs", "text MB")]
    for name, s in manifest["subsets"].items():
        rows.append((name, str(s.get("documents", 0)), str(s.get("kept", 0)), str(sum(s.get("filtered", {}).values())),
                     str(s.get("tokens", 0)), str(s.get("tokens_with_epochs", 0)),
                     f"{s.get('text_bytes', 0) / 1e6:.2f}"))
    totals, dead, meg = manifest["totals"], manifest["dead_letters"], manifest["megatron"]
    lines = [
        format_table(rows),
        "",
        f"megatron indexed dataset: {totals['documents']} documents, {totals['tokens']} tokens ({meg['dtype']}) in "
        f"{len(manifest['shards'])} .bin/.idx pair(s), {totals['bytes'] / 1e6:.1f} MB",
        f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))}",
    ]
    if 0 < len(manifest["shards"]) <= 16:
        lines.append(f"--data-path {data_path(blend(manifest), root or '')}")
    elif manifest["shards"]:
        lines.append(f"{len(manifest['shards'])} prefixes: `pile-pipeline data-path {root or 'OUTPUT_DIR'}` prints "
                     "the --data-path line")
    if seconds is not None:
        lines.append(f"time: {seconds:.1f} s")
    return "\n".join(lines)
