"""The read stage: input files -> chunks of lines on the workers, for the token-shard job and the tokenizer sample.

Element shapes:
  (file_index, path[, frame | stripe | row group])   -> ReadChunksFn -> Chunk + file stats on STATS
  (file_index, path, Done)                            -> ReadChunksFn -> Committed (one per chunk) + damage on STATS
  (slot, work items[, removed, verdicts])             -> ReadThenFn (read, then the next step) -> its outputs
A frame is one unit of an indexed input (pipeline/io/frames.py); a stripe, every n-th chunk of a file
read by several workers (pipeline/beam/runners/work_items.py). With a work folder (a resumable run,
pipeline/io/workfolder.py) the reader commits what each work item held once it has read it, and a
work item whose chunks a run before committed is `Done` (`plan_done`): not read, its chunks go on
as `Committed` markers (pipeline/process/commit.py). How work items reach the workers,
where they read their own, is their runner profile's (pipeline/beam/runners/: DirectRunner's
workers, Dask's tasks, which hand the graph `Unread` items). Shared by every runner: the reader,
the names every stage shares, the metrics namespace and the STATS output (dicts summed into the
manifest's counts).
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import time
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.beam.execution import Workspace, file_sizes
from pipeline.beam.graph import Runtime, multi_output
from pipeline.beam.preflight import Job
from pipeline.beam.progress import Reporter
from pipeline.core.content import limbs, lines_term
from pipeline.core.documents import PILE, Schema
from pipeline.io import columnar, frames, inputs
from pipeline.io.frames import Frame, Stripe, read_units
from pipeline.io.snapshot import unchanged
from pipeline.io.urls import redact_url
from pipeline.io.workfolder import WorkFolder
from pipeline.process import commit
from pipeline.process.commit import Committed, Done

LOG = logging.getLogger(__name__)
NAMESPACE = "pile"
STATS = "stats"


class ChunkCoder(beam.coders.Coder):
    """A Chunk pickled; its size estimated from its lines, without encoding it.

    Beam samples the size of elements a step outputs (its metrics), by encoding them unless the
    coder can tell: pickling the sampled chunks whole costs CPU and short-lived buffers of their size,
    and doubles the encoding of the sampled chunks a fanned-out job sends through its shuffle.
    """

    def encode(self, value: inputs.Chunk) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> inputs.Chunk:
        return pickle.loads(encoded)

    def estimate_size(self, value: inputs.Chunk | Committed) -> int:
        if isinstance(value, Committed):  # a marker in the chunks' place (a resumed run)
            return 64
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
                 snapshots: dict | None = None, schema: Schema = PILE, work: WorkFolder | None = None):
        self._schema = schema  # the columns a Parquet or Arrow input is read from
        self._work = work  # where what each work item held is committed (None: not resumable)
        self._chunk_bytes = chunk_bytes
        self._max_line_bytes = max_line_bytes
        self._on_corrupt_file = on_corrupt_file
        self._progress = progress or Reporter()
        self._bytes = counter("decompressed_bytes")
        self._chunks = counter("chunks")
        self._files = counter("files_read")
        self._snapshots = snapshots or {}  # path -> its snapshot at launch (pipeline/io/snapshot.py)

    @classmethod
    def like(cls, other: ReadChunksFn) -> ReadChunksFn:
        """The same reader (its settings, counters and progress), of this class."""
        fn = cls.__new__(cls)
        fn.__dict__.update(other.__dict__)
        return fn

    def _unit_chunks(self, element) -> Iterator[inputs.Chunk]:
        """The chunks of a work item: a whole file, one frame, one row group or one stripe."""
        file_index, path = element[:2]
        unit = element[2] if len(element) > 2 else None
        if isinstance(unit, Stripe) and unit.board is None:  # every chunk seen, its own kept: the file's count known
            return (chunk for chunk in self._seen(inputs.iter_chunks(path, file_index, self._chunk_bytes,
                                                                     self._max_line_bytes))
                    if chunk.chunk_index % unit.count == unit.index)
        return unit_chunks(path, file_index, unit, self._chunk_bytes, self._max_line_bytes, self._schema)

    def _seen(self, chunks: Iterator[inputs.Chunk]) -> Iterator[inputs.Chunk]:
        """The chunks of a whole file, counted as they pass (`_file_chunks`), before a stripe keeps its own."""
        for chunk in chunks:
            self._file_chunks = chunk.chunk_index + 1
            yield chunk

    def _taken(self, chunks: Iterator[inputs.Chunk], element) -> Iterator[inputs.Chunk]:
        """The chunks as this reader hands them on (all of them)."""
        return chunks

    def process(self, element):
        file_index, path = element[:2]
        unit = element[2] if len(element) > 2 else None
        if isinstance(unit, Done):
            yield from self._committed(element, unit)
            return
        shown = redact_url(path)
        lines = size = chunks = content = 0
        start = time.monotonic()
        LOG.info("reading %s", shown)
        file_stats: dict = {}
        self._file_chunks = None
        held = []  # the chunk indices read (for the work item's record)
        try:
            chunks_of = unchanged(self._unit_chunks(element), path, self._snapshots.get(path))
            for chunk in self._taken(chunks_of, element):
                lines += len(chunk.lines)
                size += chunk.num_bytes
                content += lines_term(chunk.lines)
                chunks += 1
                held.append(chunk.chunk_index)
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
        file_stats.update({"path": shown, "lines": lines, "decompressed_bytes": size, "chunks": chunks,
                           "content": limbs(content)})
        self._commit_unit(file_index, unit, held, file_stats.get("damaged"))
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {f"{file_index:05d}": file_stats}})

    def _commit_unit(self, file_index: int, unit, held: list[int], damaged: str | None) -> None:
        """Commit which chunks the work item held, read to its end: a stripe's reader commits the whole file's."""
        key = commit.unit_key(unit)
        if self._work is None or key is None or isinstance(unit, Frame):  # a frame's chunks are in its index
            return
        if isinstance(unit, Stripe):
            if self._file_chunks is None and held:
                return  # a reader that did not see every chunk of the file
            held = list(range(self._file_chunks or 0))
        commit.commit_unit(self._work, file_index, key, held, damaged)

    def _committed(self, element, done: Done):
        """A Done work item: a Committed marker per chunk (their read counts come with their results), its damage."""
        file_index, path = element[:2]
        for chunk_index in done.chunks:
            yield Committed(file_index, chunk_index, path, done.unit)
        self._progress.add(read=done.size)
        self._files.inc()
        # Zero counts: each chunk's share comes with its committed result (pipeline/beam/chunk_documents.py).
        file_stats = {"path": redact_url(path), "lines": 0, "decompressed_bytes": 0, "chunks": 0, "content": limbs(0),
                      **({"damaged": done.damaged} if done.damaged else {})}
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {f"{file_index:05d}": file_stats}})

    def finish_bundle(self):
        self._progress.flush()

    def teardown(self):
        self._progress.close()


def unit_chunks(path: str, file_index: int, unit, chunk_bytes: int, max_line_bytes: int,
                schema: Schema = PILE) -> Iterator[inputs.Chunk]:
    """The chunks of a work item (a whole file, a frame, a row group or a stripe), whatever the input's kind."""
    if columnar.is_columnar(path):
        return columnar.iter_unit_chunks(path, file_index, unit, chunk_bytes, schema)
    return frames.iter_unit_chunks(path, file_index, unit, chunk_bytes, max_line_bytes)


@dataclasses.dataclass(frozen=True)
class Unread:
    """Chunks not read yet, where the step that takes them reads them itself (`chunk_stage`; Dask's tasks).

    items: one element per task, (slot, work items) or, once dedup's removals are joined,
    (slot, work items, {(file_index, chunk_index): {line: removed record}}, the stages' verdicts the
    same way or None); read_fn: what reads a work item; slots_of_file: the slots that read each file.
    """

    items: beam.PCollection
    read_fn: ReadChunksFn
    slots_of_file: dict


class ReadThenFn(beam.DoFn):
    """A task's work items read, and each chunk handed to `stage` as it is read; the read stats on STATS."""

    def __init__(self, read_fn: ReadChunksFn, stage: beam.DoFn):
        self._read, self._stage = read_fn, stage

    def setup(self):
        self._read.setup()
        self._stage.setup()

    def start_bundle(self):
        self._read.start_bundle()
        self._stage.start_bundle()

    def process(self, element):
        _, units, *joined = element
        removed, verdicts = (*joined, None, None)[:2]
        for unit in units:
            for out in self._read.process(unit):
                if isinstance(out, beam.pvalue.TaggedOutput):
                    yield out
                    continue
                key = (out.file_index, out.chunk_index)
                item = out if removed is None else (out, removed.get(key, {})) if verdicts is None else (
                    out, removed.get(key, {}), verdicts.get(key, {}))
                yield from self._stage.process(item) or ()

    def finish_bundle(self):
        self._read.finish_bundle()
        yield from self._stage.finish_bundle() or ()

    def teardown(self):
        self._read.teardown()
        self._stage.teardown()


def chunk_stage(chunks, label: str, fn: beam.DoFn, *tags: str, main: str, runtime: Runtime):
    """The first step that takes the read chunks (tokenizing, dedup's documents), with its outputs.

    Where chunks are `Unread` the step reads them itself, in the same task: the read stats come out
    on its STATS, which must be among `tags`.
    """
    if isinstance(chunks, Unread):
        if STATS not in tags:
            tags = (*tags, STATS)
        return multi_output(chunks.items, label, ReadThenFn(chunks.read_fn, fn), *tags, main=main, runtime=runtime)
    return multi_output(chunks, label, fn, *tags, main=main, runtime=runtime)


def plan_done(work: WorkFolder, part: str, files: list[tuple[int, str]], frames_of: dict, dedup: bool = False) -> dict:
    """`frames_of` with each work item whose every chunk has a committed result (of step `part`) made `Done`.

    With `dedup`, its chunks' dedup input must be committed too. What a work item holds is known
    from its frame's index, or from its record, committed once it was read to its end (a whole
    file, also by a reader of one of its stripes; a row group).
    """
    results = {i: {int(name) for name in names} for i, names in work.names(commit.RESULT, part).items()}
    if dedup:
        signed = work.names(commit.DEDUP, "")
        results = {i: have & {int(name) for name in signed.get(i, ())} for i, have in results.items()}
    records = work.names(commit.UNIT, "")
    done_items, out = 0, {}
    for (i, _), size in zip(files, file_sizes([path for _, path in files]), strict=True):
        units = []
        for unit in frames_of[i]:
            key = commit.unit_key(unit)
            if isinstance(unit, Frame):
                held, damaged = tuple(range(unit.first_chunk, unit.first_chunk + unit.chunks)), None
            elif key in records.get(i, ()):
                held, damaged = commit.fetch_unit(work, i, key) or (None, None)
            else:
                held = None
            if held is None or not set(held) <= results.get(i, set()):
                units.append(unit)
                continue
            units.append(Done(unit, held, damaged, size if unit is None else unit.size))
            done_items += 1
        out[i] = units
    if done_items:
        LOG.info("resume: %d work item(s) finished by the run before are not read again", done_items)
    return out


def read_chunks(p: beam.Pipeline, job: Job, workspace: Workspace):
    """Read the inputs into chunks on the workers: (chunks, read stats).

    Fanned out (Dataflow, Flink, Spark; or without a reader), any worker tokenizes any chunk.
    Otherwise the workspace's reader (its runner profile's, pipeline/beam/runners/) hands each worker
    its own work items: it returns the chunks and their stats, or `Unread` work items and None where
    the step that takes the chunks reads them itself (`chunk_stage`).
    """
    cfg, execution = job.config, job.execution
    files = list(enumerate(job.input_files))  # (file_index, path)
    read_fn = ReadChunksFn(cfg.chunk_bytes, cfg.max_line_bytes, cfg.on_corrupt_file, reporter(job, workspace),
                           dict(job.snapshots), cfg.schema, workspace.work)
    # An indexed input (pipeline/io/frames.py) is read one frame per work item, on any worker; a
    # Parquet file one row group per work item (pipeline/io/columnar.py).
    frames_of = {i: columnar.read_units(path) if columnar.is_columnar(path) else
                 read_units(path, cfg.chunk_bytes, cfg.max_line_bytes) for i, path in files}
    if workspace.work is not None:
        frames_of = plan_done(workspace.work, commit.part_of(cfg), files, frames_of, cfg.dedup_enabled)
    if not execution.fan_out and workspace.reader is not None:
        return workspace.reader.read(p, job, read_fn, files, frames_of)
    units = [(i, path, unit) for i, path in files for unit in frames_of[i]]
    read_out = multi_output(p | "ListInputs" >> beam.Create(units), "ReadChunks", read_fn, STATS, main="chunks",
                            runtime=workspace.runtime, main_type=inputs.Chunk)
    # A .zst file cannot be split: fan its chunks out so that 30 files do not cap parallelism.
    return read_out.chunks | "FanOut" >> beam.Reshuffle(), read_out[STATS]
