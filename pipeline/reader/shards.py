"""The shards a manifest lists, as the reader sees them: locations, counts, and integrity checks.

A shard that is missing, has another size, or (when asked) another sha256 than the manifest says is
a `ShardIntegrityError` naming the file, before step 0. Shards on a filesystem TensorFlow cannot open
(`s3://` without tensorflow-io, `memory://`) are copied through fsspec into a local cache, checked
on the way, and read from there.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import hashlib
import os
import posixpath
import shutil
import tempfile
import threading

import fsspec
import numpy as np
import tensorflow as tf

from pipeline.core.hashing import sha256_stream
from pipeline.format import manifest as manifest_lib
from pipeline.format import records

DTYPES = {"uint16": tf.uint16, "int32": tf.int32}
OPTIONAL_FEATURES = (records.SEGMENT_IDS, records.POSITIONS)


class ShardIntegrityError(ValueError):
    """A shard the manifest lists is missing, has the wrong size or checksum, or reads short.

    Attributes:
        path: the shard's location, as derived from the manifest.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"ShardIntegrityError: {path}: {problem}")

    def __reduce__(self):
        return type(self), (self.path, self.problem)


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """What the reader needs of a manifest: where the shards are, their counts, sizes and digests."""

    manifest_file: str
    seq_len: int
    token_dtype: str
    optional: tuple[str, ...]  # optional features the records hold
    urls: tuple[str, ...]
    counts: tuple[int, ...]
    sizes: tuple[int, ...]
    sha256: tuple[str | None, ...]


def _manifest_file(manifest: str | os.PathLike) -> str:
    path = os.fspath(manifest)
    return path if path.endswith(".json") else manifest_lib.manifest_path(path)


def load_source(manifest: str | os.PathLike) -> ShardSource:
    """The shards of a manifest (an output directory or its manifest.json), checked for what the reader reads."""
    path = _manifest_file(manifest)
    m = manifest_lib.load_manifest(path)
    features = m.get("features") or {}
    tokens = features.get(records.TOKENS) or {}
    seq_len = int(m["seq_len"])
    if tokens.get("dtype") not in DTYPES or tokens.get("byte_order", "little") != "little":
        raise manifest_lib.ManifestError(
            f"{path}: tokens feature {tokens!r}: this reader reads little-endian uint16 or int32"
        )
    if list(tokens.get("shape", [seq_len + 1])) != [seq_len + 1]:
        raise manifest_lib.ManifestError(
            f"{path}: tokens shape {tokens.get('shape')} does not match seq_len {seq_len} (+1)"
        )
    shards = m["shards"]
    if not shards:
        raise manifest_lib.ManifestError(f"{path}: the manifest lists no shards")
    return ShardSource(
        manifest_file=path,
        seq_len=seq_len,
        token_dtype=tokens["dtype"],
        optional=tuple(name for name in OPTIONAL_FEATURES if name in features),
        urls=tuple(manifest_lib.shard_url(path, s) for s in shards),
        counts=tuple(int(s["records"]) for s in shards),
        sizes=tuple(int(s["bytes"]) for s in shards),
        sha256=tuple(s.get("sha256") for s in shards),
    )


def check_sizes(source: ShardSource) -> None:
    """Every listed shard exists with its byte size (one directory listing per directory)."""
    fs, _ = fsspec.core.url_to_fs(source.manifest_file)
    listings: dict[str, dict[str, int]] = {}
    for url, expected in zip(source.urls, source.sizes, strict=True):
        path = fsspec.core.url_to_fs(url)[1]
        parent, name = posixpath.split(path.rstrip("/"))
        if parent not in listings:
            try:
                entries = fs.ls(parent, detail=True, refresh=True)
            except FileNotFoundError:
                entries = []
            listings[parent] = {posixpath.basename(e["name"].rstrip("/")): e.get("size") for e in entries}
        size = listings[parent].get(name)
        if size is None:
            raise ShardIntegrityError(url, "missing (listed in the manifest, not on the filesystem)")
        if int(size) != expected:
            raise ShardIntegrityError(
                url, f"{size} bytes on disk, the manifest says {expected} (truncated or replaced)"
            )


def _sha256_of(url: str) -> str:
    with fsspec.open(url, "rb") as f:
        return sha256_stream(f)


def check_checksums(source: ShardSource) -> None:
    """Every listed shard's sha256 matches the manifest (shards hashed concurrently)."""
    todo = [(u, h) for u, h in zip(source.urls, source.sha256, strict=True) if h]
    workers = min(8, os.cpu_count() or 1, max(1, len(todo)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for (url, expected), actual in zip(todo, pool.map(lambda t: _sha256_of(t[0]), todo), strict=True):
            if actual != expected:
                raise ShardIntegrityError(url, f"sha256 {actual}, the manifest says {expected} (corrupted)")


def tf_can_open(url: str) -> bool:
    """Whether TensorFlow's file system layer can read this location directly."""
    protocol, _ = fsspec.core.split_protocol(url)
    if protocol in (None, "file", "local"):
        return True
    try:
        tf.io.gfile.exists(url)
    except (tf.errors.UnimplementedError, NotImplementedError):
        return False
    except tf.errors.OpError:
        return True
    return True


def tf_path(url: str) -> str:
    """The form of a location TensorFlow opens (a plain path for local files)."""
    protocol, path = fsspec.core.split_protocol(url)
    return path if protocol in ("file", "local") else url


class ShardCache:
    """Copies shards TensorFlow cannot open into a local directory, verifying size and sha256.

    At most `keep` copies exist at once; the oldest is deleted when a new one arrives (a reader
    still holding it open keeps reading on POSIX filesystems).
    """

    def __init__(self, source: ShardSource, cache_dir: str | None, keep: int):
        self._source = source
        self._dir = tempfile.mkdtemp(prefix="tfdata-shards-", dir=cache_dir)
        self._keep = keep
        self._held: collections.OrderedDict[int, str] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._empty = os.path.join(self._dir, "empty.tfrecord")  # for reads of 0 records
        open(self._empty, "wb").close()
        atexit.register(shutil.rmtree, self._dir, True)

    def fetch(self, shard: np.ndarray, count: np.ndarray) -> bytes:
        """Local path of shard `shard` (copied and verified now), or of an empty file if `count` is 0."""
        if int(count) == 0:
            return self._empty.encode()
        index = int(shard)
        url = self._source.urls[index]
        local = os.path.join(self._dir, f"{index:06d}.tfrecord")
        digest, size = hashlib.sha256(), 0
        tmp = local + ".partial"
        try:
            with fsspec.open(url, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(8 << 20):
                    digest.update(chunk)
                    size += len(chunk)
                    dst.write(chunk)
        except FileNotFoundError as e:
            raise ShardIntegrityError(url, "missing (listed in the manifest, not on the filesystem)") from e
        if size != self._source.sizes[index]:
            raise ShardIntegrityError(url, f"read {size} bytes, the manifest says {self._source.sizes[index]}")
        expected = self._source.sha256[index]
        if expected and digest.hexdigest() != expected:
            raise ShardIntegrityError(url, f"sha256 {digest.hexdigest()}, the manifest says {expected}")
        os.replace(tmp, local)
        with self._lock:
            self._held[index] = local
            self._held.move_to_end(index)
            while len(self._held) > self._keep:
                _, old = self._held.popitem(last=False)
                if old != local:
                    try:
                        os.remove(old)
                    except FileNotFoundError:
                        pass
        return local.encode()
