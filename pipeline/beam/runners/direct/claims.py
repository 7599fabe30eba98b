"""Chunks of a file shared by the worker threads of one process, each tokenized by the first to take it.

Static stripes (every n-th chunk to each of n workers, pipeline/io/frames.py) split a file by count,
not by cost: on real text the two halves of a file differ by 3-4% in tokens, and the worker that
finishes first waits for the other. When DirectRunner's workers are threads of one process they
share a board instead: every reader of a shared file decompresses all of it (as a stripe does) and
tokenizes the chunks it is first to claim, so the readers of the last file finish within about a
chunk of each other. The output does not depend on who took which chunk (chunks are placed by their
index). Nothing may go missing either: a reader marks a chunk done once the steps after it have
taken it, and the last of a file's readers to finish checks that every chunk of the file was done
(a chunk claimed by a reader that then failed, in a bundle run again, fails the job). The same
board holds the run's queue of work items (pipeline/beam/read.py `Queued`, key -1): every worker
goes through the whole queue and reads the items (or groups of items) it is first to take.

    >>> chunks = list(range(3))
    >>> list(claimed(iter(chunks), "run-a", 0, readers=1, index=lambda c: c))
    [0, 1, 2]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
KEEP_RUNS = 8  # boards kept per process (a test process runs many jobs)


class ClaimError(RuntimeError):
    """A shared file whose chunks were not all tokenized exactly once."""


class _File:
    def __init__(self):
        self.claimed: set[int] = set()
        self.done: set[int] = set()
        self.finished = 0
        self.chunks = 0


_LOCK = threading.Lock()
_BOARDS: dict[str, dict[int, _File]] = {}


def _file(run: str, file_index: int) -> _File:
    board = _BOARDS.get(run)
    if board is None:
        while len(_BOARDS) >= KEEP_RUNS:
            del _BOARDS[next(iter(_BOARDS))]
        board = _BOARDS[run] = {}
    return board.setdefault(file_index, _File())


def claimed(chunks: Iterator[T], run: str, file_index: int, readers: int, index: Callable[[T], int]) -> Iterator[T]:
    """The chunks of `chunks` (one file, read whole) that this reader is the first of `readers` to claim.

    Raises ClaimError when the last reader finishes and some chunk was claimed but never done.
    """
    seen = 0
    for chunk in chunks:
        i = index(chunk)
        seen = max(seen, i + 1)
        with _LOCK:
            entry = _file(run, file_index)
            mine = i not in entry.claimed
            entry.claimed.add(i)
        if mine:
            yield chunk
            with _LOCK:
                _file(run, file_index).done.add(i)
    with _LOCK:
        entry = _file(run, file_index)
        entry.finished += 1
        entry.chunks = max(entry.chunks, seen)
        last = entry.finished >= readers
        missing = sorted(set(range(entry.chunks)) - entry.done) if last else []
    if missing:
        what = f"file {file_index}: chunks" if file_index >= 0 else "work items"
        raise ClaimError(f"{what} {missing[:5]} were claimed by a reader that did not finish them")
