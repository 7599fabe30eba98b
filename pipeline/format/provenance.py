"""`provenance/*.npz`: the source spans of every record (written with `--provenance`), and their lookup.

One file per input file (the records of its chunks and of its joined tails) and one for the job's
last records, each an .npz of int64 arrays:

    sources      [S, 4]  (kind, copy, file_index, chunk_index): a block of records the job made
    records      [S]     how many records each block holds
    span_starts  [S + 1] block i's spans are spans[span_starts[i]:span_starts[i + 1]]
    spans        [M, 4]  (file_index, line, first_token, tokens): pipeline/core/provenance.py

A block's spans cover its records' labels in order: record j of a block holds the block's labels
[j * seq_len, (j + 1) * seq_len) (the padded record: its valid labels only). A best_fit block's
spans cover its padding too, as rows of file index -1 (pipeline/core/best_fit.py), so the same
arithmetic holds; lookups leave those rows out.

A document store (`--output_format megatron --provenance`) writes the same files with one block per
(group, epoch copy, input file, chunk): `sources` rows (group key, copy, file_index, chunk_index),
`records` its documents, and one span per document (its whole tokens). `StoreProvenance` finds a
stored document's input line: a group's documents are its blocks' documents in source order.

Finding a record of a shard: the job numbers all records by a global index g, blocks in sorted
source order and records in order within each block, and writes g at position
`Permutation(N, seed)(g)` of the shuffled order; shard s holds positions [bounds[s], bounds[s + 1])
in order (pipeline/core/shuffle.py). So (shard, record) -> position -> g (the permutation's
inverse) -> block and record in it -> its spans.
"""

from __future__ import annotations

import hashlib
import io
import posixpath

import fsspec
import numpy as np

from pipeline.core import provenance
from pipeline.core.hashing import stable_hash
from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.format.manifest import ManifestError

DIRECTORY = "provenance"


def file_name(split: str, file_index: int | None) -> str:
    """Where the spans of one input file's records go (None: the job's last records)."""
    tail = "final" if file_index is None else f"{file_index:05d}"
    return posixpath.join(DIRECTORY, f"{split}-{tail}.npz")


def encode(blocks: list[tuple[tuple, int, np.ndarray]]) -> bytes:
    """The .npz bytes of blocks (source id, records, spans), in source order."""
    blocks = sorted(blocks, key=lambda b: tuple(b[0]))
    sizes = np.array([len(spans) for _, _, spans in blocks], np.int64)
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        sources=np.array([list(s) for s, _, _ in blocks], np.int64).reshape(-1, 4),
        records=np.array([n for _, n, _ in blocks], np.int64),
        span_starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        spans=provenance.concat_spans([spans for _, _, spans in blocks]),
    )
    return buffer.getvalue()


def _provenance_files(manifest_file: str, manifest: dict, what: str, records: str) -> list[tuple[str, int, str]]:
    """(path, bytes, sha256) of the provenance files a manifest lists, beside it; refused when it lists none."""
    entry = manifest.get("provenance")
    if not entry:
        raise ManifestError(f"{manifest_file}: this {what} was written without --provenance; run the job again "
                            f"with --provenance to record {records}")
    base = posixpath.dirname(manifest_file)
    out = []
    for i, f in enumerate(entry["files"]):
        size, sha = f.get("bytes"), f.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(sha, str):
            raise ManifestError(f"{manifest_file}: provenance.files[{i}] has no byte size and sha256")
        out.append((posixpath.join(base, f["path"]), size, sha))
    return out


class _SpanFiles:
    """The provenance files, each read whole and checked against the manifest before it is parsed.

    A file whose size or sha256 differs from the manifest's is refused (a line number shifted by one
    would print another document), and so is a span naming no input file, a line before the first,
    or an empty or negative token range: `ManifestError` naming the file.
    """

    _files: list[tuple[str, int, str]]
    _inputs: int  # input files the manifest lists
    _padding: bool  # whether rows of file index -1 (a best_fit record's padding) may occur
    _loaded: dict[int, tuple[np.ndarray, np.ndarray]]

    def _setup(self, manifest_file: str, manifest: dict, what: str, records: str, padding: bool) -> None:
        self._files = _provenance_files(manifest_file, manifest, what, records)
        self._inputs = len(manifest.get("inputs") or [])
        self._padding = padding
        self._loaded = {}

    def _arrays(self, i: int, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Arrays of provenance file i, from bytes whose size and sha256 are the manifest's."""
        url, size, sha = self._files[i]
        with fsspec.open(url, "rb") as f:
            data = f.read(size + 1)
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise ManifestError(f"{url}: {len(data)} bytes and a sha256 other than the manifest's ({size} bytes): "
                                "changed since the job wrote it")
        with np.load(io.BytesIO(data)) as z:
            return {name: z[name] for name in names}

    def _spans_of_file(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if i not in self._loaded:
            z = self._arrays(i, ("span_starts", "spans", "records"))
            self._loaded[i] = self._checked(i, z["span_starts"], z["spans"], len(z["records"]))
        return self._loaded[i]

    def _checked(self, i: int, starts: np.ndarray, spans: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray]:
        url = self._files[i][0]
        spans = np.asarray(spans).reshape(-1, 4) if np.asarray(spans).size else np.zeros((0, 4), np.int64)
        if len(starts) != blocks + 1 or (len(starts) and (starts[0] != 0 or starts[-1] != len(spans)
                                                           or (np.diff(starts) < 0).any())):
            raise ManifestError(f"{url}: its span_starts do not index its spans")
        file_index, line, first, tokens = spans.T
        lowest = -1 if self._padding else 0
        named = file_index >= 0
        bad = ((file_index < lowest) | (file_index >= self._inputs) | (named & (line < 1)) | (first < 0)
               | (tokens < 1))
        if bad.any():
            row = spans[int(np.flatnonzero(bad)[0])].tolist()
            raise ManifestError(f"{url}: span {row} (file index, line, first token, tokens) names no line of the "
                                f"{self._inputs} input files")
        return starts, spans


class ProvenanceIndex(_SpanFiles):
    """The spans of any record of an output, from its manifest and provenance files."""

    def __init__(self, manifest_file: str, manifest: dict):
        self._setup(manifest_file, manifest, "output", "where each record comes from", padding=True)
        self._seq_len = int(manifest["seq_len"])
        shuffle = manifest["shuffle"]
        self._num_records = int(manifest["totals"]["records"])
        self._plan = ShardPlan(self._num_records, int(shuffle["num_shards"]))
        self._perm = Permutation(self._num_records, int(shuffle["seed"]))
        sources, records, owners = [], [], []
        for i in range(len(self._files)):
            z = self._arrays(i, ("sources", "records"))
            sources.append(z["sources"])
            records.append(z["records"])
            owners.append(np.full(len(z["records"]), i, np.int64))
        self._sources = np.concatenate(sources)
        self._records = np.concatenate(records)
        self._owner = np.concatenate(owners)
        self._row = np.concatenate([np.arange(len(r)) for r in records])
        order = np.lexsort(self._sources.T[::-1])  # sorted source ids: the job's global order
        self._sorted = order
        self._offsets = np.concatenate([[0], np.cumsum(self._records[order])])
        if int(self._offsets[-1]) != self._num_records:
            raise ManifestError(
                f"{manifest_file}: the provenance files account for {int(self._offsets[-1])} records, "
                f"the output holds {self._num_records}"
            )

    def global_index(self, shard_index, positions_in_shard) -> np.ndarray:
        """The job's global record index of records given as (shard, record in shard)."""
        bounds = self._plan.bounds()
        return self._perm.inverse(bounds[np.asarray(shard_index)] + np.asarray(positions_in_shard))

    def spans(self, shard_index, positions_in_shard) -> list[np.ndarray]:
        """The spans of each record given as (shard, record in shard)."""
        out = []
        for g in self.global_index(shard_index, positions_in_shard).tolist():
            k = int(np.searchsorted(self._offsets, g, side="right")) - 1
            block = int(self._sorted[k])
            j = g - int(self._offsets[k])
            starts, spans = self._spans_of_file(int(self._owner[block]))
            row = int(self._row[block])
            mine = spans[starts[row] : starts[row + 1]]
            spans = provenance.cut(mine, j * self._seq_len, (j + 1) * self._seq_len)
            out.append(spans[spans[:, 0] >= 0])  # a best_fit record's padding rows name no file
        return out


def group_key(group: str) -> int:
    """A store's group (its subset with --per_subset, else "") as the int64 of its provenance blocks."""
    return stable_hash("megatron-group", group) >> 1


class StoreProvenance(_SpanFiles):
    """The input line of any document of a document store, from its manifest and provenance files."""

    def __init__(self, manifest_file: str, manifest: dict):
        self._setup(manifest_file, manifest, "store", "each document's input line", padding=False)
        rows = []  # (group key, copy, file, chunk, documents, file number, block in file)
        for i in range(len(self._files)):
            z = self._arrays(i, ("sources", "records"))
            n = len(z["records"])
            rows.append(np.concatenate([z["sources"], z["records"][:, None], np.full((n, 1), i),
                                        np.arange(n)[:, None]], axis=1))
        table = np.concatenate(rows) if rows else np.zeros((0, 7), np.int64)
        self._table = table[np.lexsort(table[:, 3::-1].T)]  # by group, copy, file, chunk: the stored order
        # Each shard's first document within its group: the group's shards in name order.
        self._group = [group_key(s.get("subset") or "") for s in manifest["shards"]]
        self._first = []
        seen: dict[int, int] = {}
        for key, shard in zip(self._group, manifest["shards"], strict=True):
            self._first.append(seen.get(key, 0))
            seen[key] = seen.get(key, 0) + int(shard["documents"])
        for key, count in seen.items():
            mine = self._table[self._table[:, 0] == key]
            if int(mine[:, 4].sum()) != count:
                raise ManifestError(f"{manifest_file}: the provenance files account for {int(mine[:, 4].sum())} "
                                    f"documents of a group that holds {count}")

    def line_of(self, shard: int, document: int) -> tuple[int, int]:
        """(input file index, line) of document `document` of shard `shard` (manifest order)."""
        key = self._group[shard]
        mine = self._table[self._table[:, 0] == key]
        g = self._first[shard] + int(document)
        ends = np.cumsum(mine[:, 4])
        b = int(np.searchsorted(ends, g, side="right"))
        row = mine[b]
        j = g - int(ends[b] - row[4])
        starts, spans = self._spans_of_file(int(row[5]))
        file_index, line, _, _ = spans[int(starts[row[6]]) + j].tolist()
        return int(file_index), int(line)
