"""The read stage: input files -> chunks of lines on the workers, for the token-shard job and the tokenizer sample.

Element shapes:
  (file_index, path[, frame | stripe | row group[, Queued]])
                                                     -> ReadChunksFn -> Chunk + file stats on STATS
A frame is one unit of an indexed input (pipeline/io/frames.py); a stripe, every n-th chunk of a file
read by several DirectRunner workers (pipeline/beam/execution.py); `Queued`: a unit on the run's
queue, read by the first worker free to take it. Also here: the names every stage
shares, the metrics namespace and the STATS output (dicts summed into the manifest's counts).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import pickle
import time

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.beam.execution import (
    READ_SHARE,
    READ_SHARE_FAST,
    Workspace,
    balance,
    file_sizes,
    queue_groups,
    share_files,
    text_bytes_guess,
)
from pipeline.beam.preflight import Job
from pipeline.beam.progress import Reporter
from pipeline.core.documents import PILE, Schema
from pipeline.io import claims, columnar, frames, inputs
from pipeline.io.frames import Stripe, read_units
from pipeline.io.snapshot import unchanged
from pipeline.io.urls import redact_url
from pipeline.tokenize.engines import BATCHED

LOG = logging.getLogger(__name__)
NAMESPACE = "pile"
STATS = "stats"
QUEUE = -1  # the claims board's key of a run's queue of work items (a file's key is its index, >= 0)
GROUP_BATCHES = 2  # a group of queued items holds up to this many tokenizer calls of text (`_on_queue`)


@dataclasses.dataclass(frozen=True)
class Queued:
    """A work item on the queue of a run whose workers are threads of one process (pipeline/io/claims.py).

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


class ChunkCoder(beam.coders.Coder):
    """A Chunk pickled; its size estimated from its lines, without encoding it.

    Beam samples the size of elements a step outputs (its metrics), by encoding them unless the
    coder can tell: pickling the sampled 4 MB chunks costs CPU and short-lived buffers as large as
    the chunks, and doubles the encoding of the sampled chunks a fanned-out job sends through its
    shuffle.
    """

    def encode(self, value: inputs.Chunk) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> inputs.Chunk:
        return pickle.loads(encoded)

    def estimate_size(self, value: inputs.Chunk) -> int:
        return value.num_bytes + 64 * len(value.lines)  # the lines' bytes, and each Line's fields

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return inputs.Chunk


beam.coders.registry.register_coder(inputs.Chunk, ChunkCoder)


def counter(name: str):
    """A Beam counter of the job's namespace."""
    return Metrics.counter(NAMESPACE, name)


def reporter(job: Job, workspace: Workspace) -> Reporter:
    """Where a worker reports its progress (pipeline/beam/progress.py)."""
    return Reporter(workspace.progress, job.execution.input_bytes)


class ReadChunksFn(beam.DoFn):
    """(file_index, path[, frame]) -> Chunk, streaming the file; file stats go to the STATS output.

    With a frame (an indexed input, pipeline/io/frames.py), only that frame is read. A damaged file
    fails the job (`on_corrupt_file="fail"`) or is recorded in the stats, keeping the lines read
    before the damage (`"skip"`). Used by every job that reads inputs.
    """

    def __init__(self, chunk_bytes: int, max_line_bytes: int, on_corrupt_file: str, progress: Reporter | None = None,
                 snapshots: dict | None = None, schema: Schema = PILE):
        self._schema = schema  # the columns a Parquet or Arrow input is read from
        self._chunk_bytes = chunk_bytes
        self._max_line_bytes = max_line_bytes
        self._on_corrupt_file = on_corrupt_file
        self._progress = progress or Reporter()
        self._bytes = counter("decompressed_bytes")
        self._chunks = counter("chunks")
        self._files = counter("files_read")
        self._snapshots = snapshots or {}  # path -> its snapshot at launch (pipeline/io/snapshot.py)

    def process(self, element):
        file_index, path = element[:2]
        unit = element[2] if len(element) > 2 else None
        ends_group = len(element) > 3 and element[3].ends_group
        shown = redact_url(path)
        lines = size = chunks = 0
        start = time.monotonic()
        LOG.info("reading %s", shown)
        file_stats: dict = {}
        try:
            if columnar.is_columnar(path):
                chunks_of = columnar.iter_unit_chunks(path, file_index, unit, self._chunk_bytes, self._schema)
            else:
                chunks_of = frames.iter_unit_chunks(path, file_index, unit, self._chunk_bytes, self._max_line_bytes)
            chunks_of = unchanged(chunks_of, path, self._snapshots.get(path))
            # A queued group is taken until its chunks are tokenized: none waits for a batch after it.
            for chunk in _last_marked(chunks_of) if ends_group else chunks_of:
                lines += len(chunk.lines)
                size += chunk.num_bytes
                chunks += 1
                self._bytes.inc(chunk.num_bytes)
                self._chunks.inc()
                self._progress.add(read=chunk.input_bytes)
                yield chunk
        except inputs.CorruptInputError as e:
            if self._on_corrupt_file == "fail":
                raise inputs.CorruptInputError(
                    f"{e} -- the job stops (pass --on_corrupt_file skip to keep the lines read before "
                    "the damage and record the file as damaged)"
                ) from None
            LOG.error("damaged input, keeping the %d lines read before the damage: %s", lines, e)
            counter("files_damaged").inc()
            file_stats["damaged"] = str(e)
        self._files.inc()
        elapsed = max(time.monotonic() - start, 1e-9)
        LOG.info("read %s: %d lines, %.1f MB in %.1f s", shown, lines, size / 1e6, elapsed)
        file_stats.update({"path": shown, "lines": lines, "decompressed_bytes": size, "chunks": chunks})
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {f"{file_index:05d}": file_stats}})

    def finish_bundle(self):
        self._progress.flush()

    def teardown(self):
        self._progress.close()


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


def read_chunks(p: beam.Pipeline, job: Job, workspace: Workspace):
    """Read the inputs into chunks on the workers: (chunks, read stats).

    Fanned out (distributed runners), any worker tokenizes any chunk. On DirectRunner each worker
    reads and tokenizes its own work items, balanced by size (pipeline/beam/execution.py).
    """
    cfg, execution = job.config, job.execution
    files = list(enumerate(job.input_files))  # (file_index, path)
    read_fn = ReadChunksFn(cfg.chunk_bytes, cfg.max_line_bytes, cfg.on_corrupt_file, reporter(job, workspace),
                           dict(job.snapshots), cfg.schema)
    # An indexed input (pipeline/io/frames.py) is read one frame per work item, on any worker; a
    # Parquet file one row group per work item (pipeline/io/columnar.py).
    frames_of = {i: columnar.read_units(path) if columnar.is_columnar(path) else
                 read_units(path, cfg.chunk_bytes, cfg.max_line_bytes) for i, path in files}
    if execution.fan_out:
        units = [(i, path, unit) for i, path in files for unit in frames_of[i]]
        read_out = p | "ListInputs" >> beam.Create(units) | "ReadChunks" >> beam.ParDo(read_fn).with_output_types(
            inputs.Chunk).with_outputs(STATS, main="chunks")
        # A .zst file cannot be split: fan its chunks out so that 30 files do not cap parallelism.
        return read_out.chunks | "FanOut" >> beam.Reshuffle(), read_out[STATS]
    units, costs = _work_items(job, files, frames_of, workspace.board)
    if workspace.board and execution.workers > 1:
        batch = execution.encode_batch_bytes if job.tokenizer.backend.name in BATCHED else 0
        by_slot = _on_queue(units, costs, execution.workers, workspace.board, batch)
    else:
        # The stripes of a file go to different workers (each reads the whole file for its share).
        slot_of = balance(costs, execution.workers, [u[0] if isinstance(u[2], Stripe) else None for u in units])
        by_slot = sorted(zip(slot_of, units, strict=True), key=lambda item: (item[0], item[1][0]))
    read_out = (
        p
        | "ListInputs" >> beam.Create(by_slot, reshuffle=False)
        # One group per worker: DirectRunner hands each worker whole groups.
        | "GroupFilesByWorker" >> beam.GroupByKey()
        | "FilesOfWorker" >> beam.FlatMap(lambda kv: _worker_order(kv[1]))
        | "ReadChunks" >> beam.ParDo(read_fn).with_output_types(inputs.Chunk).with_outputs(STATS, main="chunks")
    )
    return read_out.chunks, read_out[STATS]


def _on_board(unit: tuple) -> bool:
    return len(unit) > 2 and isinstance(unit[2], Stripe) and unit[2].board is not None


def _on_queue(units: list[tuple], costs: list[float], workers: int, board: str,
              batch_bytes: int = 0) -> list[tuple[int, tuple]]:
    """(worker, unit) for threads of one process: every worker gets the queue, largest first, and its stripes.

    `batch_bytes`: the text the tokenizer takes per call (0: a chunk per call); items are then taken
    in groups of up to twice that (`queue_groups`, sizes guessed from the stored ones).
    """
    order = sorted((j for j, unit in enumerate(units) if not _on_board(unit)), key=lambda j: (-costs[j], j))
    if batch_bytes:
        after = sum(text_bytes_guess(unit[1], cost) for unit, cost in zip(units, costs, strict=True)
                    if _on_board(unit))
        groups = queue_groups([text_bytes_guess(units[j][1], costs[j]) for j in order], after, workers,
                              GROUP_BATCHES * batch_bytes)
    else:
        groups = list(range(len(order)))
    queue = [(*units[j], Queued(board, position, workers, group, position + 1 == len(order) or
                                groups[position + 1] != group))
             for position, (j, group) in enumerate(zip(order, groups, strict=True))]
    shared = [unit for unit in units if _on_board(unit)]
    return [(w, unit) for w in range(workers) for unit in queue] + [(u[2].index % workers, u) for u in shared]


def _worker_order(units):
    """A worker's units in reading order: the queue's items it takes first, then the files it shares.

    The readers of a shared file take its chunks as they are free, evening out the end.
    """
    units = list(units)
    queue = sorted((u for u in units if len(u) > 3), key=lambda u: u[3].position)
    if queue:
        first = queue[0][3]
        groups = [list(group) for _, group in itertools.groupby(queue, key=lambda u: u[3].group)]
        for group in claims.claimed(iter(groups), first.board, QUEUE, first.readers, index=lambda g: g[0][3].group):
            yield from group
    yield from sorted((u for u in units if len(u) <= 3), key=lambda u: u[:2])


def _work_items(job: Job, files: list[tuple[int, str]], frames_of: dict,
                board: str | None = None) -> tuple[list[tuple], list[float]]:
    """DirectRunner's work items ((file_index, path, Frame | Stripe | None)) and their estimated costs.

    With a `board` (the workers are threads of this process) the other items go on a queue the
    workers take them from (`_on_queue`) and the largest whole file is shared by every worker, its
    chunks claimed as the workers get free (pipeline/io/claims.py), last: whatever the estimates got
    wrong, the workers finish together.
    """
    sizes = file_sizes([path for _, path in files])
    indexed = {i for i, _ in files if frames_of[i] != [None]}
    read_share = READ_SHARE.get(job.tokenizer.backend.name, READ_SHARE_FAST)
    # Only a JSON-lines file is read in stripes (every n-th chunk): an Arrow file is read whole, by one worker.
    whole = [j for j, (i, path) in enumerate(files) if i not in indexed and not columnar.is_columnar(path)]
    stripes = dict.fromkeys(range(len(files)), 1)
    workers = job.execution.workers
    if job.execution.share and board and workers > 1 and whole:
        stripes[max(whole, key=lambda j: (sizes[j], -j))] = workers
    elif job.execution.share:
        stripes.update(zip(whole, share_files([sizes[j] for j in whole], workers, read_share), strict=True))
    units, costs = [], []
    for j, (i, path) in enumerate(files):
        if i in indexed:
            units += [(i, path, frame) for frame in frames_of[i]]
            costs += [sizes[j] * frame.size / sum(f.size for f in frames_of[i]) for frame in frames_of[i]]
        elif stripes[j] == 1:
            units.append((i, path, None))
            costs.append(sizes[j] * (1 + read_share))
        else:
            units += [(i, path, Stripe(k, stripes[j], board)) for k in range(stripes[j])]
            costs += [sizes[j] * (read_share + 1 / stripes[j])] * stripes[j]
    shared = {files[j][1]: k for j, k in stripes.items() if k > 1}
    if shared:
        LOG.info("files read in stripes by several workers%s: %s",
                 " (each chunk tokenized by the first worker free to claim it)" if board else "",
                 ", ".join(f"{redact_url(path)} ({k})" for path, k in sorted(shared.items())))
    return units, costs


