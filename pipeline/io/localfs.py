"""What kind of filesystem holds a local path, and what that allows: a page cache of our own, direct I/O.

The type comes from Linux's /proc/self/mounts (the longest mount point that holds the path); on
other systems, or for a path no mount holds, it is unknown (None) and nothing is assumed of it.

- `is_local_disk`: a disk of this machine (ext4, xfs, ...), whose page cache is this machine's: a
  process here reads back what it wrote from memory (a network or FUSE filesystem may not keep
  those pages, and a random read there is a round trip).
- `open_direct`: a file opened for direct I/O (O_DIRECT), on a local disk only: the bytes go from the
  writer's buffer to the disk without a copy into the page cache. Worth it for a large file written
  once and read elsewhere (a shard: its pages would only evict others').

Shared helpers; choosing them is a runner's (DirectRunner's spill sink, pipeline/beam/runners/direct/spill.py,
asks `publish` for direct I/O: pipeline/io/publish.py `direct_io`).
"""

from __future__ import annotations

import os

# Filesystems whose pages a process on this machine reads from its own page cache.
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "tmpfs", "overlay"})
# Buffers, offsets and lengths of direct I/O are multiples of this: the page size, at least every
# disk's logical block (512 or 4096 bytes).
DIRECT_ALIGN = 4096


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding `path` (Linux's /proc/self/mounts), None when unknown."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) > 2]
    except OSError:
        return None
    path = os.path.realpath(path)
    best, kind = "", None
    for point, fstype in mounts:
        point = point.replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def is_local_disk(path: str) -> bool:
    """Whether `path` is on a filesystem of this machine (its page cache is this machine's)."""
    return filesystem_type(path) in LOCAL_FILESYSTEMS


def open_direct(path: str) -> int | None:
    """A new file at `path` opened for writing with direct I/O; None where that is not to be had.

    None: no O_DIRECT on this system, not a local disk, or the filesystem refuses it (tmpfs does);
    the caller then writes through the page cache as usual.
    """
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or not is_local_disk(os.path.dirname(os.path.abspath(path))):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    except OSError:
        return None
