"""A store's .idx entries read by position, checked: an index cut or rewritten while a rank reads it is an error.

A memory map of a file cut while mapped reads zeros to the end of its last page and kills the
process with SIGBUS past it; an index rewritten in place (zeroed) reads as other lengths. Either
way the batches would change with no error. So the entries a lookup needs are read with `pread`,
which returns short on a cut file, and checked before use:

* a length is >= 1 (the job writes no empty document: a zeroed index reads 0);
* a document's pointer and the next one's (the .bin's size after the last document) span exactly
  its length, inside the .bin.

Anything else is a `ShardIntegrityError` naming the .idx. Entries are read one `pread` each where
they lie scattered (a big store: a few per shard in a lookup of 65,536 positions, ~1 µs each), or
in runs where they lie close together (entries less than _GAP bytes apart read in one call).
"""

from __future__ import annotations

import os

import numpy as np

from pipeline.format import megatron as fmt
from pipeline.reader.engine.errors import ShardIntegrityError

_GAP = 4096  # entries closer than this (bytes) are read in one call
_LENGTH = np.dtype("<i4")
_POINTER = np.dtype("<i8")


class IndexFile:
    """One .idx of a store: its documents' lengths and byte spans in the .bin, read by position and checked.

    Args:
        path: the .idx.
        documents: documents it holds (checked against the manifest before step 0).
        itemsize: bytes per token.
        bin_bytes: its .bin's size.
        fd: an open file descriptor of it.
    """

    def __init__(self, path: str, documents: int, itemsize: int, bin_bytes: int, fd: int):
        self.path, self.n, self.itemsize, self.bin_bytes, self.fd = path, int(documents), itemsize, bin_bytes, fd

    def _entries(self, first_byte: int, dtype: np.dtype, local: np.ndarray, width: int) -> np.ndarray:
        """[len(local), width] entries of `dtype` starting at entry local[i] of the array at `first_byte`."""
        uniq, inverse = np.unique(local, return_inverse=True)
        span = width * dtype.itemsize
        at = first_byte + uniq * dtype.itemsize
        cuts = np.flatnonzero(at[1:] - (at[:-1] + span) > _GAP) + 1
        if len(cuts) + 1 > len(uniq) // 4:  # scattered: one pread each
            data = b"".join([os.pread(self.fd, span, a) for a in at.tolist()])
            if len(data) != span * len(uniq):
                self._cut(first_byte)
            values = np.frombuffer(data, dtype).reshape(-1, width)
        else:
            values = np.empty((len(uniq), width), dtype)
            for run in np.split(np.arange(len(uniq)), cuts):
                lo, hi = int(at[run[0]]), int(at[run[-1]]) + span
                data = os.pread(self.fd, hi - lo, lo)
                if len(data) != hi - lo:
                    self._cut(first_byte)
                rel = (at[run] - lo) // dtype.itemsize
                values[run] = np.frombuffer(data, dtype)[rel[:, None] + np.arange(width)]
        return values[inverse.reshape(-1)]

    def _cut(self, at: int):
        size = os.fstat(self.fd).st_size
        raise ShardIntegrityError(self.path, f"read short at byte {at}: {size} bytes now, "
                                             "cut or replaced since the start")

    def lengths(self, local: np.ndarray) -> np.ndarray:
        """Tokens of documents `local` of this file (int64), each >= 1."""
        out = self._entries(fmt.HEADER_BYTES, _LENGTH, local, 1)[:, 0].astype(np.int64)
        if len(out) and int(out.min()) < 1:
            i = int(np.argmin(out))
            raise ShardIntegrityError(self.path, f"document {int(local[i])} has {int(out[i])} tokens: the index "
                                                 "was changed since the start (zeroed or rewritten)")
        return out

    def spans(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(byte offset in the .bin, tokens) of documents `local` (int64), each span checked against its length."""
        lengths = self.lengths(local)
        pairs = self._entries(fmt.HEADER_BYTES + 4 * self.n, _POINTER, local, 2).astype(np.int64)
        begin, end = pairs[:, 0], pairs[:, 1]
        end[local == self.n - 1] = self.bin_bytes  # the entry after the last pointer is not a pointer
        bad = (begin < 0) | (end > self.bin_bytes) | (end - begin != lengths * self.itemsize)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ShardIntegrityError(self.path, f"document {int(local[i])}: pointers {int(begin[i])}..{int(end[i])} "
                                                 f"do not span its {int(lengths[i])} tokens in a .bin of "
                                                 f"{self.bin_bytes} bytes: the index was changed since the start")
        return begin, lengths
