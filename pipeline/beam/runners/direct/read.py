"""How DirectRunner's workers get their work items: each reads its own, balanced, or takes them from a queue.

On DirectRunner every element that crosses a stage boundary goes through the driver process, so a
fan-out of chunks costs a full pass of the text through the driver before any tokenizing starts.
Instead each worker reads its own work items and streams read -> tokenize -> pack in one fused
stage (pipeline/beam/runners/work_items.py: whole files, frames, row groups, stripes).

Element shapes:
  (worker, (file_index, path[, unit[, Queued]]))  -> GroupFilesByWorker -> one group per worker
  the worker's items, in reading order           -> ClaimingReadChunksFn -> Chunk + file stats on STATS
With a board (the workers are threads of the driver, pipeline/beam/runners/direct/claims.py) every worker
goes through the same queue of items (`Queued`), largest first, reading those it is the first to
take, and the readers of the largest file tokenize the chunks they are first to claim: whatever the
estimates got wrong, the workers finish together.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import apache_beam as beam

from pipeline.beam.preflight import Job
from pipeline.beam.read import STATS, ReadChunksFn
from pipeline.beam.runners.direct.claims import claimed
from pipeline.beam.runners.work_items import balance, stripes_apart, text_bytes_guess, work_items
from pipeline.io import inputs
from pipeline.io.frames import Stripe
from pipeline.tokenize.engines import BATCHED

QUEUE = -1  # the claims board's key of a run's queue of work items (a file's key is its index, >= 0)
GROUP_BATCHES = 2  # a group of queued items holds up to this many tokenizer calls of text (`on_queue`)


@dataclasses.dataclass(frozen=True)
class Queued:
    """A work item on the queue of a run whose workers are threads of one process (claims.py).

    Every worker goes through the same queue, largest items first, and reads the items it is the
    first to take: the workers stay busy until the queue is empty, whatever the estimates got wrong.
    Consecutive items may be taken as one group (`queue_groups`); the last chunk of a group is
    tokenized at once, so a group is done when its reading ends.
    """

    board: str
    position: int
    readers: int
    group: int = 0
    ends_group: bool = True


class WorkItems:
    """The workspace's reader on DirectRunner (pipeline/beam/read.py `read_chunks`): work items per worker.

    board: the run's key on the claims board, when the workers are threads of this process (None:
    static stripes, no queue).
    """

    def __init__(self, board: str | None = None):
        self.board = board

    def read(self, p: beam.Pipeline, job: Job, read_fn: ReadChunksFn, files: list[tuple[int, str]], frames_of: dict):
        """The chunks and the read stats: each worker reads its own work items, balanced by estimated cost."""
        execution = job.execution
        units, costs = work_items(job, files, frames_of, self.board)
        if self.board and execution.workers > 1:
            batch = execution.encode_batch_bytes if job.tokenizer.backend.name in BATCHED else 0
            by_slot = on_queue(units, costs, execution.workers, self.board, batch)
        else:
            # The stripes of a file go to different workers (each reads the whole file for its share).
            slot_of = balance(costs, execution.workers, stripes_apart(units))
            by_slot = sorted(zip(slot_of, units, strict=True), key=lambda item: (item[0], item[1][0]))
        read_out = (
            p
            | "ListInputs" >> beam.Create(by_slot, reshuffle=False)
            # One group per worker: DirectRunner hands each worker whole groups.
            | "GroupFilesByWorker" >> beam.GroupByKey()
            | "FilesOfWorker" >> beam.FlatMap(lambda kv: worker_order(kv[1]))
            | "ReadChunks" >> beam.ParDo(ClaimingReadChunksFn.like(read_fn)).with_output_types(
                inputs.Chunk).with_outputs(STATS, main="chunks")
        )
        return read_out.chunks, read_out[STATS]


class ClaimingReadChunksFn(ReadChunksFn):
    """ReadChunksFn that also reads a stripe on the board (the chunks it is first to claim) and queued groups."""

    def _unit_chunks(self, element) -> Iterator[inputs.Chunk]:
        file_index, path = element[:2]
        unit = element[2] if len(element) > 2 else None
        if isinstance(unit, Stripe) and unit.board:
            chunks = claimed(self._seen(inputs.iter_chunks(path, file_index, self._chunk_bytes, self._max_line_bytes)),
                             unit.board, file_index, unit.count, lambda chunk: chunk.chunk_index)
            return (dataclasses.replace(chunk, tokenize_now=True) for chunk in chunks)
        return super()._unit_chunks(element)

    def _taken(self, chunks: Iterator[inputs.Chunk], element) -> Iterator[inputs.Chunk]:
        # A queued group is taken until its chunks are tokenized: none waits for a batch after it.
        return _last_marked(chunks) if len(element) > 3 and element[3].ends_group else chunks


def _last_marked(chunks):
    """The chunks, the last (also the last before damage) marked `tokenize_now`; each held until the next is read."""
    held = None
    try:
        for chunk in chunks:
            if held is not None:
                yield held
            held = chunk
    except inputs.CorruptInputError:
        if held is not None:
            yield dataclasses.replace(held, tokenize_now=True)
        raise
    if held is not None:
        yield dataclasses.replace(held, tokenize_now=True)


def queue_groups(sizes: list[float], after: float, workers: int, target: float) -> list[int]:
    """The group of each item of a queue (`sizes` in queue order): consecutive items taken as one.

    A group is tokenized in calls of the batch size, not a call per item (many small files), and is
    at most `target` and 1/(2 * workers) of the work left from it to the end (`after`: the work after
    the queue): groups shrink toward the end (guided self-scheduling) and the workers finish together.

    >>> queue_groups([4] * 12, 0, 2, 8), queue_groups([50, 4, 4], 0, 2, 8)
    ([0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2])
    """
    left = sum(sizes) + after
    groups, group, held, cap = [], -1, 0.0, 0.0
    for size in sizes:
        if group < 0 or held + size > cap:
            group, held, cap = group + 1, 0.0, min(target, left / (2 * workers))
        held += size
        left -= size
        groups.append(group)
    return groups


def on_board(unit: tuple) -> bool:
    """Whether a work item is a stripe on the board (its chunks claimed by the file's readers)."""
    return len(unit) > 2 and isinstance(unit[2], Stripe) and unit[2].board is not None


def on_queue(units: list[tuple], costs: list[float], workers: int, board: str,
              batch_bytes: int = 0) -> list[tuple[int, tuple]]:
    """(worker, unit) for threads of one process: every worker gets the queue, largest first, and its stripes.

    `batch_bytes`: the text the tokenizer takes per call (0: a chunk per call); items are then taken
    in groups of up to twice that (`queue_groups`, sizes guessed from the stored ones).
    """
    order = sorted((j for j, unit in enumerate(units) if not on_board(unit)), key=lambda j: (-costs[j], j))
    if batch_bytes:
        after = sum(text_bytes_guess(unit[1], cost) for unit, cost in zip(units, costs, strict=True)
                    if on_board(unit))
        groups = queue_groups([text_bytes_guess(units[j][1], costs[j]) for j in order], after, workers,
                              GROUP_BATCHES * batch_bytes)
    else:
        groups = list(range(len(order)))
    queue = [(*units[j], Queued(board, position, workers, group, position + 1 == len(order) or
                                groups[position + 1] != group))
             for position, (j, group) in enumerate(zip(order, groups, strict=True))]
    shared = [unit for unit in units if on_board(unit)]
    return [(w, unit) for w in range(workers) for unit in queue] + [(u[2].index % workers, u) for u in shared]


def worker_order(units):
    """A worker's units in reading order: the queue's items it takes first, then the files it shares.

    The readers of a shared file take its chunks as they are free, evening out the end.
    """
    units = list(units)
    queue = sorted((u for u in units if len(u) > 3), key=lambda u: u[3].position)
    if queue:
        first = queue[0][3]
        groups = [list(group) for _, group in itertools.groupby(queue, key=lambda u: u[3].group)]
        for group in claimed(iter(groups), first.board, QUEUE, first.readers, index=lambda g: g[0][3].group):
            yield from group
    yield from sorted((u for u in units if len(u) <= 3), key=lambda u: u[:2])
