"""The shards a manifest lists, as the reader sees them: locations, counts, layout, and integrity checks.

Before step 0, on every rank (`load_source`, `check_sizes`, `locate_records`, optionally
`check_checksums`): the manifest must add up (record counts x record size = byte counts, totals and
packing stats = the shard list: pipeline/format/layout.py); every listed shard must exist with its
byte size; the header of every shard's last record must sit where that arithmetic puts it (one
12-byte read per shard, concurrently), which also finds the padded record. Anything else is a
`ShardIntegrityError` (or a `ManifestError` for the manifest itself) naming the file.

Shards on a filesystem TensorFlow cannot open (`s3://` without tensorflow-io, `memory://`) are read
through fsspec: each byte range a rank reads is copied into a local cache file and read from there.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import os
import posixpath
import shutil
import tempfile

import fsspec
import numpy as np
import tensorflow as tf

from pipeline.core.hashing import sha256_stream
from pipeline.format import layout as layout_lib
from pipeline.format import manifest as manifest_lib
from pipeline.format import records
from pipeline.reader.engine.request import OPTIONAL_FEATURES
from pipeline.reader.integrity import ShardIntegrityError

DTYPES = {"uint16": tf.uint16, "int32": tf.int32}
_PROBE_THREADS = 8


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """What the reader needs of a manifest: where the shards are, their counts, sizes, digests, layout."""

    manifest_file: str
    seq_len: int
    token_dtype: str
    optional: tuple[str, ...]  # optional features the records hold
    urls: tuple[str, ...]
    counts: tuple[int, ...]
    sizes: tuple[int, ...]
    sha256: tuple[str | None, ...]
    layout: layout_lib.ShardLayout
    packing: str = records.CONCAT  # the records' layout: best_fit pads inside records (segment id 0)


def _manifest_file(manifest: str | os.PathLike) -> str:
    path = os.fspath(manifest)
    return path if path.endswith(".json") else manifest_lib.manifest_path(path)


def load_source(manifest: str | os.PathLike) -> ShardSource:
    """The shards of a manifest (an output directory or its manifest.json), checked for what the reader reads.

    Raises:
        ManifestError: no manifest, or one that does not describe a usable, consistent output.
    """
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
        layout=layout_lib.shard_layout(m, path),
        packing=records.packing_mode(m),
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


def _read_at(url: str):
    fs, path = fsspec.core.url_to_fs(url)

    def read(offset: int, size: int) -> bytes:
        return fs.cat_file(path, start=offset, end=offset + size)

    return read


def locate_records(source: ShardSource) -> ShardSource:
    """Check that each shard's last record starts where the size arithmetic says; find the padded record.

    One 12-byte header read per shard (concurrently), plus ~log2(records) for the shard holding
    the padded record. Call after `check_sizes`.

    Returns:
        The source, its layout completed with the padded record's position.

    Raises:
        ShardIntegrityError: a shard whose record headers are not where its records should be.
    """
    layout = source.layout
    if layout.padded_shard >= 0:
        url = source.urls[layout.padded_shard]
        try:
            index = layout_lib.locate_padded(_read_at(url), source.counts[layout.padded_shard], layout)
        except (ValueError, OSError) as e:
            raise ShardIntegrityError(url, f"its records are not where the manifest's sizes put them ({e})") from e
        layout = dataclasses.replace(layout, padded_index=index)
    full = layout.record_bytes - layout_lib.HEADER_BYTES - layout_lib.FOOTER_BYTES

    def check(i: int) -> None:
        count = source.counts[i]
        if count == 0:
            return
        last = int(layout.offsets([i], [count - 1])[0])
        padded_last = i == layout.padded_shard and layout.padded_index == count - 1
        expected = full + (layout.padded_extra if padded_last else 0)
        try:
            length = layout_lib.header_length(_read_at(source.urls[i])(last, layout_lib.HEADER_BYTES))
        except OSError as e:
            raise ShardIntegrityError(source.urls[i], f"cannot read its last record ({e})") from e
        if length != expected:
            raise ShardIntegrityError(
                source.urls[i],
                f"no record header at byte {last}, where record {count - 1} of {count} records of "
                f"{layout.record_bytes} bytes must start (the file does not hold the manifest's records)",
            )

    workers = min(_PROBE_THREADS, len(source.urls))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(check, range(len(source.urls))))
    return dataclasses.replace(source, layout=layout)


class ShardCache:
    """Copies byte ranges of shards TensorFlow cannot open into local files, each removed once read.

    A file must exist until TensorFlow has opened it (a missing file would make the read retry
    forever under `ignore_errors`), so the reader releases each one only after its run has been
    read and parsed; whatever is left is removed at exit.
    """

    def __init__(self, source: ShardSource, cache_dir: str | None):
        self._source = source
        self._dir = tempfile.mkdtemp(prefix="tfdata-shards-", dir=cache_dir)
        atexit.register(shutil.rmtree, self._dir, True)

    def fetch_all(self, pieces: np.ndarray) -> np.ndarray:
        """Local paths of new files holding each piece's bytes (pieces: rows of shard, offset, records, bytes)."""
        out = []
        for shard, start, _, size in np.asarray(pieces).reshape(-1, 4).tolist():
            url = self._source.urls[shard]
            try:
                data = _read_at(url)(start, size)
            except FileNotFoundError as e:
                raise ShardIntegrityError(url, "missing (listed in the manifest, not on the filesystem)") from e
            # A short range reads as a short piece: the window's count check names the shard.
            fd, local = tempfile.mkstemp(prefix=f"{shard:06d}-{start}-", suffix=".tfrecord", dir=self._dir)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            out.append(local.encode())
        return np.array(out, dtype=object)

    def release(self, paths: np.ndarray) -> np.int64:
        """Remove files `fetch_all` returned, once their records are read."""
        for path in np.asarray(paths).reshape(-1).tolist():
            try:
                os.remove(path.decode() if isinstance(path, bytes) else str(path))
            except FileNotFoundError:
                pass
        return np.int64(0)
