"""A store's .idx read by position: the entries asked for, and an index cut or zeroed since the start refused.

The .idx is written by the job's own writer (`pipeline.format.megatron.index_parts`); `IndexFile`
reads it the way the reader does, both where the entries asked for lie scattered (one read each)
and where they lie close (runs). The reader over a store the job wrote, cut while a rank reads it:
tests/test_docstore.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from pipeline.format import megatron as fmt
from pipeline.reader.engine.errors import ShardIntegrityError
from pipeline.reader.engine.store_index import IndexFile

DTYPE = np.dtype("<u2")


@pytest.fixture
def index(tmp_path):
    lengths = np.random.default_rng(3).integers(1, 900, 5000)
    path = tmp_path / "a.idx"
    path.write_bytes(b"".join(fmt.index_parts(lengths, DTYPE)))
    fd = os.open(path, os.O_RDONLY)
    yield IndexFile(str(path), len(lengths), DTYPE.itemsize, int(lengths.sum()) * 2, fd), lengths
    os.close(fd)


# Scattered (one read each), close together (runs), one document, the last one (whose end is the .bin's size).
ASKED = [np.array([4999, 7, 2500, 7]), np.arange(100, 3000), np.array([0]), np.arange(4990, 5000)]


@pytest.mark.parametrize("local", ASKED, ids=["scattered", "runs", "first", "last"])
def test_the_entries_asked_for(index, local):
    idx, lengths = index
    assert idx.lengths(local).tolist() == lengths[local].tolist()
    at, n = idx.spans(local)
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2
    assert at.tolist() == pointers[local].tolist() and n.tolist() == lengths[local].tolist()


@pytest.mark.parametrize("local", ASKED, ids=["scattered", "runs", "first", "last"])
@pytest.mark.parametrize("cut", [fmt.HEADER_BYTES + 4 * 2500, fmt.HEADER_BYTES, 100])
def test_an_index_cut_since_the_start_is_named(index, local, cut):
    idx, _ = index
    os.truncate(idx.path, cut)
    with pytest.raises(ShardIntegrityError, match="read short at byte") as e:
        idx.spans(local)
        idx.lengths(local)
    assert e.value.path == idx.path


@pytest.mark.parametrize("region", ["lengths", "pointers", "all"])
def test_an_index_zeroed_in_place_is_named(index, region):
    idx, lengths = index
    n = len(lengths)
    first, stop = {"lengths": (fmt.HEADER_BYTES, fmt.HEADER_BYTES + 4 * n),
                   "pointers": (fmt.HEADER_BYTES + 4 * n, fmt.HEADER_BYTES + 12 * n),
                   "all": (0, os.path.getsize(idx.path))}[region]
    with open(idx.path, "r+b") as f:
        f.seek(first)
        f.write(bytes(stop - first))
    assert os.path.getsize(idx.path) == fmt.HEADER_BYTES + 20 * n + 8  # the size is unchanged
    with pytest.raises(ShardIntegrityError, match="the index was changed since the start"):
        idx.spans(np.array([10, 3000]))
