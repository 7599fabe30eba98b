"""How the C allocator of a command's process treats the memory it frees: kept for reuse, not unmapped.

A job's worker threads allocate and free the same large buffers over and over: a batch's texts
and token ids, a chunk's records, their spill writes. glibc's defaults hand blocks over 128 KB to
mmap until a freed one raises that threshold, and give the top of a heap back to the kernel once
more than twice that is free; every new mapping is then faulted in and zeroed again, page by page
(system time), and every unmapping interrupts the other cores. A command calls
`keep_freed_memory()` as it starts: blocks up to glibc's largest threshold (32 MB) come from the
heaps from the first, and freed memory stays in them, in use again at the next batch: less system
time for a little more resident memory (what the freed buffers keep; it stays flat as the job goes
on). docs/benchmarks.md has the figures.
Elsewhere than glibc (musl, macOS) nothing changes, nor where the user tuned malloc already
(`USER_SETTINGS` in the environment, or `glibc.malloc` tunables in `GLIBC_TUNABLES`: theirs stand).

A Dask worker process gets the same for the length of a job (pipeline/beam/runners/dask/warm.py):
`keep_freed_memory(ignore=...)` sets it over the trim threshold Dask's nanny puts in every
worker's environment, and `restore(...)` gives the worker Dask's settings back when the job ends.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD = 1 << 30  # free memory at a heap's top given back only beyond this
TOP_PAD = 64 << 20  # a heap grows this much more than asked, in fewer steps
DEFAULT_MMAP_THRESHOLD = 128 << 10  # glibc's initial values (malloc.c DEFAULT_MMAP_THRESHOLD_MIN, DEFAULT_TOP_PAD)
DEFAULT_TOP_PAD = 128 << 10

_SETTINGS = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


# What glibc's malloc reads from the environment (its manual's "Memory Allocation Tunables").
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                 "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST")


def user_tuned(environ=os.environ, ignore: dict | None = None) -> bool:
    """Whether the user set glibc's malloc through the environment (then theirs is kept).

    `ignore`: settings that are not the user's when they have these values (a runner's own defaults).
    """
    ignore = ignore or {}
    return any(name in environ and environ[name] != ignore.get(name) for name in USER_SETTINGS) or (
        "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def _mallopt():
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def keep_freed_memory(ignore: dict | None = None) -> bool:
    """Set glibc's malloc to keep freed memory for reuse (see the module); whether it was set.

    `ignore`: environment settings that are not the user's (`user_tuned`).
    """
    if not _glibc() or user_tuned(ignore=ignore):
        return False
    mallopt = _mallopt()
    return mallopt is not None and all(mallopt(param, value) == 1 for param, value in _SETTINGS)


def restore(trim_threshold: int) -> None:
    """Undo `keep_freed_memory`: glibc's initial thresholds, `trim_threshold`, and the freed memory given back."""
    mallopt = _mallopt()
    if mallopt is None or not _glibc():
        return
    for param, value in ((M_MMAP_THRESHOLD, DEFAULT_MMAP_THRESHOLD), (M_TRIM_THRESHOLD, trim_threshold),
                         (M_TOP_PAD, DEFAULT_TOP_PAD)):
        mallopt(param, value)
    trim = ctypes.CDLL(None).malloc_trim
    trim.argtypes = (ctypes.c_size_t,)
    trim(0)
