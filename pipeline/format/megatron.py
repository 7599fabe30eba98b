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
import hashlib
import os
import posixpath
import re
import struct
from collections.abc import Iterator

import fsspec
import numpy as np

from pipeline.core.tables import format_table
from pipeline.format import manifest as manifest_lib
from pipeline.format.summary import cleaning_lines, has_removals, removed_documents

FORMAT = manifest_lib.FORMAT_MEGATRON  # the manifest's `format`: "pile-megatron-indexed"
FORMAT_VERSION = 1
HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
# Megatron's DType codes (indexed_dataset.DType); we write only uint16 and int32, as it does.
DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}
_HEAD = struct.Struct("<9sQBQQ")  # header, version, dtype code, sequence count, document-index count
HEADER_BYTES = _HEAD.size  # the .idx's lengths start here, then its pointers, then its document indices
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
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") or "subset"


def prefix_name(split: str, middle: str, index: int, count: int) -> str:
    """A shard's path prefix: `train-00000-of-00004`, or `train-Pile_CC-00000-of-00002` per subset."""
    return f"{split}{'-' + middle if middle else ''}-{index:05d}-of-{count:05d}"


# A source (epoch copy, input file, chunk) packed into one int64, so that the layout of a whole
# corpus (one entry per source and group: ~200k chunks of the Pile, times subsets and copies) is
# numpy arrays rather than millions of Python tuples.
_KEY_FIELDS = (("copy", 7), ("file_index", 24), ("chunk_index", 32))


def source_key(copy: int, file_index: int, chunk_index: int) -> int:
    """One int64 for a source; keys sort as (copy, file, chunk) tuples do."""
    key = 0
    for (name, bits), value in zip(_KEY_FIELDS, (copy, file_index, chunk_index), strict=True):
        if not 0 <= value < 1 << bits:
            raise ValueError(f"{name} {value} is outside [0, {1 << bits}) in the Megatron writer's layout")
        key = (key << bits) | value
    return key


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each source's documents go: its first document and first byte within its group.

    A group is the subset name with --per_subset, else "". Within a group, sources are in key order;
    bytes count each document's tokens and its index entry (`INDEX_BYTES_PER_DOCUMENT`), the
    measure shards are cut by.

    >>> a, b = source_key(0, 0, 0), source_key(0, 0, 1)
    >>> layout = Layout.from_counts([{"x": np.array([[b, 2, 50]]), "y": np.array([[a, 1, 9]])},
    ...                              {"x": np.array([[a, 3, 70]])}])
    >>> layout.offsets("x", a), layout.offsets("x", b), layout.offsets("y", a)
    ((0, 0), (3, 70), (0, 0))
    """

    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # group -> (keys, first document, first byte)

    @classmethod
    def from_counts(cls, counts: list[dict[str, np.ndarray]]) -> Layout:
        """From {group: [k, 3] int64 array of (source key, documents, bytes)} dicts, in any order."""
        parts: dict[str, list[np.ndarray]] = {}
        for chunk in counts:
            for group, rows in chunk.items():
                parts.setdefault(group, []).append(np.asarray(rows, np.int64).reshape(-1, 3))
        groups = {}
        for group, arrays in parts.items():
            rows = np.concatenate(arrays)
            rows = rows[np.argsort(rows[:, 0], kind="stable")]
            if (np.diff(rows[:, 0]) == 0).any():
                raise ValueError(f"a source of group {group!r} was counted twice")
            firsts = [np.cumsum(rows[:, c]) - rows[:, c] for c in (1, 2)]
            groups[group] = (rows[:, 0], firsts[0], firsts[1])
        return cls(groups)

    def offsets(self, group: str, key: int) -> tuple[int, int]:
        """(first document, first byte) of a source."""
        keys, documents, first_bytes = self.groups.get(group, (np.zeros(0, np.int64),) * 3)
        i = int(np.searchsorted(keys, key))
        if i == len(keys) or keys[i] != key:
            raise KeyError(f"source {key} of group {group!r} is not in the layout")
        return int(documents[i]), int(first_bytes[i])


def shard_slots(first_byte: int, sizes: np.ndarray, shard_bytes: int) -> np.ndarray:
    """The slot of each document: where in the group's byte stream it starts, // shard_bytes.

    A shard is the documents starting in one slot, so it holds at most shard_bytes plus one
    document. A document longer than a slot can leave the next slot without a start: such empty
    slots get no file, and the written shards are numbered densely (`shard_names`).

    >>> shard_slots(0, np.array([40, 40, 40, 200, 10]), 100).tolist()
    [0, 0, 0, 1, 3]
    """
    sizes = np.asarray(sizes, np.int64)
    starts = first_byte + np.cumsum(sizes) - sizes
    return starts // shard_bytes


def shard_names(used: list[tuple[str, int]], split: str) -> dict[tuple[str, int], str]:
    """The prefix of each used (group, slot): a group's shards numbered 0..count-1 in slot order.

    Groups whose names make the same file-name part (possible with --subset_names any) get a short
    hash of their name added, so that no two groups ever share a file.

    >>> shard_names([("", 3), ("", 0)], "train")
    {('', 0): 'train-00000-of-00002', ('', 3): 'train-00001-of-00002'}
    >>> sorted(shard_names([("a b", 0), ("a_b", 0)], "t").values())
    ['t-a_b_648fa9b3-00000-of-00001', 't-a_b_c8687a08-00000-of-00001']
    """
    by_group: dict[str, list[int]] = {}
    for group, slot in sorted(set(used)):
        by_group.setdefault(group, []).append(slot)
    slugs = {group: subset_slug(group) if group else "" for group in by_group}
    shared = {slug for slug in slugs.values() if list(slugs.values()).count(slug) > 1}
    for group, slug in slugs.items():
        if slug in shared:
            slugs[group] = f"{slug}_{hashlib.sha256(group.encode()).hexdigest()[:8]}"
    return {(g, s): prefix_name(split, slugs[g], i, len(slots)) for g, slots in by_group.items()
            for i, s in enumerate(slots)}


def load_manifest(path_or_dir: str) -> dict:
    """Read and check the manifest of a Megatron output (see pipeline.format.manifest)."""
    manifest = manifest_lib.load_manifest(path_or_dir, FORMAT, FORMAT_VERSION)
    for shard in manifest["shards"]:
        for suffix in ("bin", "idx"):
            if shard[suffix]["path"] != f"{shard['path']}.{suffix}":
                raise manifest_lib.ManifestError(f"shard {shard['path']!r}: its .{suffix} is not next to it")
    return manifest


def read_document(manifest_file: str, shard: dict, index: int = 0) -> np.ndarray:
    """The token ids of document `index` of a shard its manifest lists (the .idx checked against the manifest).

    `manifest_file`: the output directory or its manifest.json. Reads the .idx whole (20 bytes a document)
    and the document's own bytes of the .bin.
    """
    idx_url, bin_url = (manifest_lib.shard_url(manifest_file, shard[part]) for part in ("idx", "bin"))
    with fsspec.open(idx_url, "rb") as f:
        data = f.read(shard["idx"]["bytes"] + 1)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != shard["idx"]["bytes"] or shard["idx"].get("sha256", digest) != digest:
        raise BadIndex(f"{idx_url}: not the index its manifest lists (size or sha256 differs)")
    index_ = read_index(data)
    if index_.bin_bytes != shard["bin"]["bytes"]:
        raise BadIndex(f"{idx_url}: its lengths need {index_.bin_bytes} bytes of .bin, the manifest lists "
                       f"{shard['bin']['bytes']}")
    if not 0 <= index < len(index_.lengths):
        raise BadIndex(f"{idx_url}: no document {index} (it holds {len(index_.lengths)})")
    start, count = int(index_.pointers[index]), int(index_.lengths[index])
    with fsspec.open(bin_url, "rb") as f:
        f.seek(start)
        data = f.read(count * index_.dtype.itemsize)
    if len(data) != count * index_.dtype.itemsize:
        raise BadIndex(f"{bin_url}: shorter than its index says")
    return np.frombuffer(data, index_.dtype).astype(np.int64)


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


def via_link(pairs: list[tuple[float, str]], run_id: str, link: str) -> list[tuple[float, str]]:
    """The pairs with their run directory's name replaced by `link`, a link to it (pipeline/io/outputs.py).

    >>> via_link([(3, "run-0123456789abcdef/train-00000-of-00001")], "0123456789abcdef", "latest")
    [(3, 'latest/train-00000-of-00001')]
    """
    prefix = manifest_lib.run_dir(run_id) + "/"
    return [(w, link + "/" + p[len(prefix):] if p.startswith(prefix) else p) for w, p in pairs]


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


def format_summary(manifest: dict, seconds: float | None = None, root: str | None = None,
                   link: str | None = None) -> str:
    """A plain-text summary of a Megatron output: per-subset counts, shards, and its --data-path.

    `link`: the name of a link to the run directory for the --data-path prefixes (see `via_link`).
    """
    removing = has_removals(manifest)
    rows = [("subset", "docs", "kept", "filtered", *(["removed"] if removing else []), "tokens", "tok x epochs",
             "text MB")]
    total = [0] * (len(rows[0]) - 1)
    for name, s in manifest["subsets"].items():
        cells = [s.get("documents", 0), s.get("kept", 0), sum(s.get("filtered", {}).values()),
                 *([removed_documents(s)] if removing else []), s.get("tokens", 0),
                 s.get("tokens_with_epochs", 0), s.get("text_bytes", 0)]
        total = [a + b for a, b in zip(total, cells, strict=True)]
        rows.append((name, *map(str, cells[:-1]), f"{cells[-1] / 1e6:.2f}"))
    rows.append(("total", *map(str, total[:-1]), f"{total[-1] / 1e6:.2f}"))
    totals, dead, meg = manifest["totals"], manifest["dead_letters"], manifest["megatron"]
    lines = [
        format_table(rows, rules_before=(len(rows) - 1,)),
        "",
        f"megatron indexed dataset: {totals['documents']} documents, {totals['tokens']} tokens ({meg['dtype']}) in "
        f"{len(manifest['shards'])} .bin/.idx pair(s), {totals['bytes'] / 1e6:.1f} MB",
        f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))}",
    ]
    lines += cleaning_lines(manifest)
    if 0 < len(manifest["shards"]) <= 16:
        pairs = blend(manifest)
        pairs = via_link(pairs, manifest["run_id"], link) if link else pairs
        lines.append(f"--data-path {data_path(pairs, root or '')}")
    elif manifest["shards"]:
        lines.append(f"{len(manifest['shards'])} prefixes: `pile-pipeline data-path {root or 'OUTPUT_DIR'}` prints "
                     "the --data-path line")
    if seconds is not None:
        lines.append(f"time: {seconds:.1f} s")
    return "\n".join(lines)
