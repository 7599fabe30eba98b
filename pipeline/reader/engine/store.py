"""A document store as the reader sees it: the job's Megatron output (`--output_format megatron`), checked and opened.

The store is every .bin/.idx pair its manifest lists (pipeline/format/megatron.py has the format),
its documents numbered 0..N-1 in manifest order (shard by shard, each shard's documents in order).
Each document is ``[BOS] ids EOS`` as the job wrote it; the reader packs documents at read time
(pipeline/reader/engine/doc_stream.py), so one store serves any sequence length.

Before step 0, on every rank (`check_store`): every listed .bin and .idx exists with the manifest's
byte size (one directory listing per directory); every .idx is read whole (20 bytes per document:
its lengths, pointers and document indices), its sha256 compared with the manifest's and its
structure checked as Megatron's reader checks it (header, dtype, counts, pointers = running sum of
lengths), its document count and the .bin size it implies compared with the manifest. With
``verify=True`` every .bin's sha256 too (reads the whole store). Anything else is a
`ShardIntegrityError` naming the file. A .bin's tokens carry no checksum of their own: a flipped
byte inside one is found by ``verify=True`` only (a cut or removed .bin is found by its size).

While reading (`DocStore`): the .idx entries a lookup needs are read by position and checked
(pipeline/reader/engine/store_index.py: never memory-mapped, so an index cut or zeroed since the
start is an error, not zeros or SIGBUS), and each document range is read with one `os.preadv`
into the caller's buffer: a rank reads the bytes of the tokens it uses and no other tokens. A .idx or
.bin cut, zeroed or removed since the start: `ShardIntegrityError` naming it.

The store is read from a filesystem path (a local disk, EFS, Lustre, NFS): every document is a
random access, which object stores serve with one request each. Mount or copy an object store.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import posixpath

import numpy as np

from pipeline.format import megatron as fmt
from pipeline.format.manifest import MAX_MANIFEST_BYTES, ManifestError, manifest_path
from pipeline.reader.engine.errors import ShardIntegrityError
from pipeline.reader.engine.store_index import IndexFile

_CHECK_THREADS = 8
_HASH_BLOCK = 8 << 20


@dataclasses.dataclass(frozen=True)
class StoreSource:
    """What the reader needs of a store's manifest: its pairs, their sizes and digests, the special ids."""

    manifest_file: str
    dtype: np.dtype
    prefixes: tuple[str, ...]  # each pair's path prefix (absolute)
    documents: tuple[int, ...]  # per pair
    tokens: tuple[int, ...]  # per pair
    bin_bytes: tuple[int, ...]
    idx_bytes: tuple[int, ...]
    bin_sha256: tuple[str | None, ...]
    idx_sha256: tuple[str | None, ...]
    separator_id: int
    pad_id: int
    tokenizer_sha256: str | None
    subsets: tuple[str | None, ...]  # per pair (with --per_subset)

    @property
    def num_documents(self) -> int:
        """Documents in the store."""
        return int(sum(self.documents))

    @property
    def num_tokens(self) -> int:
        """Tokens in the store (BOS/EOS included)."""
        return int(sum(self.tokens))

    def identity(self) -> dict:
        """What a reader's state records of the store, so that a resume on another store is refused."""
        return {"documents": self.num_documents, "tokens": self.num_tokens, "shards": len(self.prefixes)}


def _manifest_file(location) -> str:
    path = os.fspath(location)
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" in path:
        raise ValueError(f"{path}: a document store is read from a filesystem path (local disk, EFS, Lustre, "
                         "NFS); mount or copy the output")
    return path if path.endswith(".json") else manifest_path(path)


def is_store(location) -> bool:
    """Whether `location` (an output directory or its manifest.json) holds a document store (Megatron output)."""
    try:
        path = _manifest_file(location)
    except (TypeError, ValueError):
        return False
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read(MAX_MANIFEST_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return False  # not a store; the TFRecord reader says what is wrong with it
    return isinstance(manifest, dict) and manifest.get("format") == fmt.FORMAT


def load_store(location) -> StoreSource:
    """The pairs of a Megatron output's manifest (an output directory or its manifest.json).

    Raises:
        ManifestError: no manifest, or one that is not a usable store.
    """
    path = _manifest_file(location)
    m = fmt.load_manifest(path)
    shards = m["shards"]
    if not shards:
        raise ManifestError(f"{path}: the manifest lists no shards")
    meg = m.get("megatron") or {}
    if meg.get("dtype") not in ("uint16", "int32"):
        raise ManifestError(f"{path}: token dtype {meg.get('dtype')!r}: this reader reads uint16 or int32")
    tok = m.get("tokenizer") or {}
    separator = tok.get("separator_id", tok.get("eos_id"))
    if not isinstance(separator, int) or separator < 0:
        raise ManifestError(f"{path}: the tokenizer entry names no separator_id (nor eos_id)")
    pad = tok.get("padding_id", separator)
    base = posixpath.dirname(path)

    def field(name, *keys):
        out = []
        for s in shards:
            value = s
            for k in keys or (name,):
                value = value.get(k) if isinstance(value, dict) else None
            out.append(value)
        return tuple(out)

    documents, tokens = field("documents"), field("tokens")
    for i, (d, t) in enumerate(zip(documents, tokens, strict=True)):
        if not isinstance(d, int) or not isinstance(t, int) or d < 0 or t < d:
            raise ManifestError(f"{path}: shards[{i}]: documents {d!r} and tokens {t!r} are not counts of a store")
    return StoreSource(
        manifest_file=path,
        dtype=np.dtype(meg["dtype"]).newbyteorder("<"),
        prefixes=tuple(posixpath.join(base, s["path"]) for s in shards),
        documents=documents,
        tokens=tokens,
        bin_bytes=field("bin", "bin", "bytes"),
        idx_bytes=field("idx", "idx", "bytes"),
        bin_sha256=field("bin", "bin", "sha256"),
        idx_sha256=field("idx", "idx", "sha256"),
        separator_id=int(separator),
        pad_id=int(pad if isinstance(pad, int) and pad >= 0 else separator),
        tokenizer_sha256=tok.get("sha256"),
        subsets=field("subset"),
    )


def _check_sizes(source: StoreSource) -> None:
    listings: dict[str, dict[str, int]] = {}
    for prefix, bin_bytes, idx_bytes in zip(source.prefixes, source.bin_bytes, source.idx_bytes, strict=True):
        for path, expected in ((prefix + ".idx", idx_bytes), (prefix + ".bin", bin_bytes)):
            parent, name = os.path.split(path)
            if parent not in listings:
                try:
                    with os.scandir(parent) as entries:
                        listings[parent] = {e.name: e.stat().st_size for e in entries if e.is_file()}
                except FileNotFoundError:
                    listings[parent] = {}
            size = listings[parent].get(name)
            if size is None:
                raise ShardIntegrityError(path, "missing (listed in the manifest, not on the filesystem)")
            if size != expected:
                raise ShardIntegrityError(path, f"{size} bytes on disk, the manifest says {expected} "
                                                "(truncated or replaced)")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _check_index(source: StoreSource, i: int) -> None:
    path = source.prefixes[i] + ".idx"
    with open(path, "rb") as f:
        data = f.read()
    expected = source.idx_sha256[i]
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise ShardIntegrityError(path, "sha256 differs from the manifest's (corrupted or replaced)")
    try:
        index = fmt.read_index(data)
    except fmt.BadIndex as e:
        raise ShardIntegrityError(path, f"not a valid index: {e}") from e
    if index.dtype != source.dtype:
        raise ShardIntegrityError(path, f"token dtype {index.dtype.name}, the manifest says {source.dtype.name}")
    if len(index.lengths) != source.documents[i]:
        raise ShardIntegrityError(path, f"{len(index.lengths)} documents, the manifest says {source.documents[i]}")
    if index.bin_bytes != source.bin_bytes[i]:
        raise ShardIntegrityError(path, f"its lengths add up to {index.bin_bytes} bytes of tokens, the .bin "
                                        f"has {source.bin_bytes[i]}")
    if len(index.lengths) and int(index.lengths.min()) < 1:
        raise ShardIntegrityError(path, "a document of no tokens (the job writes none)")


def check_store(source: StoreSource, verify: bool = False) -> None:
    """Every pair exists with its sizes, every index is intact and agrees with the manifest (module docstring).

    Raises:
        ShardIntegrityError: naming the first damaged, cut or missing file (in manifest order).
    """
    _check_sizes(source)
    jobs = [(_check_index, (source, i)) for i in range(len(source.prefixes))]
    if verify:
        jobs += [(_check_bin_sha, (source, i)) for i in range(len(source.prefixes)) if source.bin_sha256[i]]
    workers = min(_CHECK_THREADS, os.cpu_count() or 1, max(1, len(jobs)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(fn, *args) for fn, args in jobs]
        for future in futures:
            future.result()


def _check_bin_sha(source: StoreSource, i: int) -> None:
    path = source.prefixes[i] + ".bin"
    if _sha256(path) != source.bin_sha256[i]:
        raise ShardIntegrityError(path, "sha256 differs from the manifest's (corrupted or replaced)")


class DocStore:
    """An opened store: document lengths by id, and document token ranges read into a buffer.

    Holds one file descriptor per .idx and per .bin, opened on first use (so a copy sent to a
    DataLoader worker opens its own). Index entries are read by position and checked
    (pipeline/reader/engine/store_index.py), never memory-mapped.
    """

    def __init__(self, source: StoreSource):
        self.source = source
        self.first_doc = np.concatenate([[0], np.cumsum(source.documents)]).astype(np.int64)
        self.itemsize = source.dtype.itemsize
        self._opened = None

    def __getstate__(self):
        return {"source": self.source}

    def __setstate__(self, state):
        self.__init__(state["source"])

    @property
    def num_documents(self) -> int:
        """Documents in the store."""
        return int(self.first_doc[-1])

    def _open(self) -> tuple[list[IndexFile], list[int]]:
        if self._opened is None:
            indexes, fds = [], []
            source = self.source
            for prefix, n, bin_bytes in zip(source.prefixes, source.documents, source.bin_bytes, strict=True):
                fd = os.open(prefix + ".idx", os.O_RDONLY)
                indexes.append(IndexFile(prefix + ".idx", n, self.itemsize, bin_bytes, fd))
                fds.append(os.open(prefix + ".bin", os.O_RDONLY))
            self._opened = (indexes, fds)
        return self._opened

    def close(self) -> None:
        """Close the .idx and .bin files (the store opens them again when used)."""
        if self._opened is not None:
            for index in self._opened[0]:
                os.close(index.fd)
            for fd in self._opened[1]:
                os.close(fd)
            self._opened = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass

    def locate(self, docs) -> tuple[np.ndarray, np.ndarray]:
        """(shard, index in shard) of document ids."""
        docs = np.asarray(docs, np.int64)
        if docs.size and (int(docs.min()) < 0 or int(docs.max()) >= self.num_documents):
            raise IndexError(f"document ids must be in [0, {self.num_documents})")
        shard = np.searchsorted(self.first_doc, docs, side="right") - 1
        return shard, docs - self.first_doc[shard]

    def _lookup(self, docs, spans: bool) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, .bin offsets or None) of documents, read shard by shard from their .idx files."""
        indexes, _ = self._open()
        shard, local = self.locate(docs)
        lengths = np.empty(len(shard), np.int64)
        at = np.empty(len(shard), np.int64) if spans else None
        if len(shard) == 0:
            return lengths, at
        order = np.argsort(shard, kind="stable")
        bounds = np.flatnonzero(np.diff(shard[order])) + 1
        for group in np.split(order, bounds):
            index = indexes[int(shard[group[0]])]
            if spans:
                at[group], lengths[group] = index.spans(local[group])
            else:
                lengths[group] = index.lengths(local[group])
        return lengths, at

    def lengths(self, docs) -> np.ndarray:
        """Tokens of each document (int64)."""
        return self._lookup(np.asarray(docs, np.int64).reshape(-1), False)[0]

    def read_into(self, buffer: np.ndarray, offsets, docs, starts, lengths) -> None:
        """Tokens [starts[i], starts[i] + lengths[i]) of document docs[i] into buffer[offsets[i]:], converted.

        Adjacent ranges of one document read into adjacent places are read together.
        """
        _, fds = self._open()
        docs, starts, lengths = (np.asarray(x, np.int64).reshape(-1) for x in (docs, starts, lengths))
        offsets = np.asarray(offsets, np.int64).reshape(-1)
        if not len(docs):
            return
        if buffer.dtype != self.source.dtype:  # read in the store's dtype, then converted
            staging = np.empty(len(buffer), self.source.dtype)
            self.read_into(staging, offsets, docs, starts, lengths)
            used = np.zeros(len(buffer), bool)
            used[_spans(offsets, lengths)] = True
            buffer[used] = staging[used]
            return
        shard, _ = self.locate(docs)
        doc_lengths, pointers = self._lookup(docs, True)
        if (starts < 0).any() or (starts + lengths > doc_lengths).any():
            i = int(np.flatnonzero((starts < 0) | (starts + lengths > doc_lengths))[0])
            raise ShardIntegrityError(self.source.prefixes[int(shard[i])] + ".idx",
                                      f"a document of {int(doc_lengths[i])} tokens now, read as longer: the index "
                                      "was changed since the start")
        at = pointers + starts * self.itemsize  # byte offset in the shard's .bin
        # Join runs: same shard, contiguous bytes, contiguous places in the buffer.
        joins = np.concatenate([[False], (shard[1:] == shard[:-1]) & (at[1:] == at[:-1] + lengths[:-1] * self.itemsize)
                                & (offsets[1:] == offsets[:-1] + lengths[:-1])])
        heads = np.flatnonzero(~joins)
        totals = np.add.reduceat(lengths, heads) if len(heads) else heads
        # One pread per run, straight into the buffer (a short document costs a system call, so the
        # loop holds only what each call needs).
        view = memoryview(buffer).cast("B")
        size = self.itemsize
        byte_at = (offsets[heads] * size).tolist()
        byte_n = (totals * size).tolist()
        for fd_index, b, n, where in zip(shard[heads].tolist(), byte_at, byte_n, at[heads].tolist(), strict=True):
            got = os.preadv(fds[fd_index], [view[b : b + n]], where)
            if got != n:
                raise ShardIntegrityError(
                    self.source.prefixes[fd_index] + ".bin",
                    f"read {got // size} tokens where its index promises {n // size} at byte {where} "
                    "(the file was cut, replaced or removed since the start)")


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every index of the ranges [starts[i], starts[i] + lengths[i])."""
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)
