"""The TFRecord output's shards: the job's record count, each block's place in the global shuffle, the writers.

  JobStats + (source_id, n)              -> TotalsFn       -> (stats, counts) -> offsets -> ShardPlan
  (source_id, Records) + offsets + plan  -> AssignShardsFn -> (shard, (placement, Records))
  (shard, [(placement, Records)]) + plan -> WriteShardFn   -> shard info dict
Where side inputs are not computed once (pipeline/beam/graph.py), AssignJoinedFn and
WriteJoinedShardFn take the offset and the plan joined to the elements instead. The element shapes
are pipeline/beam/tfrecord/output.py's.
"""

from __future__ import annotations

import itertools
import logging
import posixpath

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipeline.beam.read import counter
from pipeline.config.job import PipelineConfig
from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.core.sources import SourceOffsets
from pipeline.core.stats import JobStats
from pipeline.io import outputs
from pipeline.io.publish import publish
from pipeline.io.record_files import RecordReader, SpilledRecords
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.spool import OrderedSpool

LOG = logging.getLogger(__name__)


class TotalsFn(beam.CombineFn):
    """STATS (JobStats, or the read stage's dicts) and COUNTS (source_id, n) -> (summed stats, [(source_id, n)])."""

    def create_accumulator(self):
        return JobStats(), []

    def add_input(self, accumulator, element):
        stats, counts = accumulator
        if isinstance(element, JobStats | dict):
            stats.merge(JobStats.of(element))
        else:
            counts.append(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        stats, counts = self.create_accumulator()
        for more_stats, more_counts in accumulators:
            stats.merge(more_stats)
            counts += more_counts
        return stats, counts

    def extract_output(self, accumulator):
        return accumulator


def totals_stats(totals: tuple[JobStats, list]) -> JobStats:
    """The job's summed stats, from TotalsFn's output."""
    return totals[0]


def totals_offsets(totals: tuple[JobStats, list]) -> SourceOffsets:
    """Where each record source starts in the job's global record order, from TotalsFn's output."""
    return SourceOffsets.from_counts(totals[1])


def plan_shards(offsets: SourceOffsets, shard_bytes: int, record_bytes: int) -> ShardPlan:
    """How many shards, from the job's record count: all that writers and the manifest need to know."""
    return ShardPlan.for_size(offsets.num_records, record_bytes, shard_bytes)


class AssignShardsFn(beam.DoFn):
    """(source_id, Records) + source offsets + plan -> (shard, (placement, Records)), one per shard touched.

    One element per (source, shard) rather than per record: far fewer elements through the shuffle.
    The placement (`shard_places`) is the global index of the block's first record when the whole
    block goes to one shard (always, with one shard): the writer then computes every position of the
    shard in one call, and what crosses the shuffle does not grow with the records (a spilled
    block's reference pickles as four numbers too: pipeline/io/record_files.py). A spilled block split
    between shards goes to each whole, placed as (its first record's global index, the indices in
    the block of the shard's records as uint32 bytes), and each writer takes its records from it;
    records that cross the shuffle themselves are split here, placed by their permuted positions
    (int64 bytes). With several shards the blocks of a bundle are permuted together, up to
    ASSIGN_BATCH_RECORDS records or ASSIGN_BATCH_BYTES of records held in memory at a time: a call
    per block of a few thousand records spends most of its time walking the cycles of its last values.
    """

    ASSIGN_BATCH_RECORDS = 1 << 20
    ASSIGN_BATCH_BYTES = 64 << 20

    def __init__(self, seed: int):
        self._seed = seed

    def start_bundle(self):
        self._held: list[tuple] = []
        self._held_records = self._held_bytes = 0
        self._side: tuple[SourceOffsets, ShardPlan] | None = None

    def process(self, element, offsets: SourceOffsets, plan: ShardPlan):
        source, recs = element
        if plan.num_shards == 1:
            if len(recs):
                yield 0, (offsets.offset(source), recs)
            return
        self._side = (offsets, plan)
        self._held.append(element)
        self._held_records += len(recs)
        self._held_bytes += 0 if isinstance(recs, SpilledRecords) else len(recs.data)
        if self._held_records >= self.ASSIGN_BATCH_RECORDS or self._held_bytes >= self.ASSIGN_BATCH_BYTES:
            yield from self._assign()

    def finish_bundle(self):
        for out in self._assign():
            yield GlobalWindows.windowed_value(out)

    def _assign(self):
        held, self._held, self._held_records, self._held_bytes = self._held, [], 0, 0
        if not held:
            return
        offsets, plan = self._side
        counts = np.array([len(recs) for _, recs in held], np.int64)
        firsts = np.array([offsets.offset(source) for source, _ in held], np.int64)
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        all_positions = Permutation(plan.num_records, self._seed)(np.repeat(firsts, counts) + within).astype("<i8")
        all_shards = plan.shard_of(all_positions)
        ends = np.cumsum(counts)
        for (_, recs), block_first, end, count in zip(held, firsts.tolist(), ends.tolist(), counts.tolist(),
                                                      strict=True):
            positions, shards = all_positions[end - count : end], all_shards[end - count : end]
            touched = np.unique(shards).tolist()
            if len(touched) == 1:  # the whole block in one shard: no copy of it
                yield touched[0], (block_first, recs)
                continue
            for shard in touched:
                members = np.flatnonzero(shards == shard)
                if isinstance(recs, SpilledRecords):
                    yield shard, ((block_first, members.astype("<u4").tobytes()), recs)
                else:
                    yield shard, (positions[members].tobytes(), recs.take(members.tolist()))


def shard_members(placement, recs):
    """A block's (placement, records) as this shard holds them.

    A (first index, members) placement becomes its records' global indices (int64) and the block a
    reference to those records only; other placements are returned as they are.
    """
    if isinstance(placement, tuple):
        block_first, members = placement
        members = np.frombuffer(members, "<u4").astype(np.int64)
        return block_first + members, recs.take(members)
    return placement, recs


def shard_places(placements: list, lengths: list[int], perm: Permutation, first: int) -> list[np.ndarray]:
    """Each block's places in its shard (int64), from its placement (`shard_members` applied).

    A placement is the records' permuted positions (int64 bytes), the global index of the block's
    first record (all its records in this shard) or the records' global indices (an int64 array).
    The blocks placed by index are permuted together, in one call.
    """
    out = [np.frombuffer(p, "<i8") - first if isinstance(p, bytes) else None for p in placements]
    indexed = [k for k, placement in enumerate(placements) if not isinstance(placement, bytes)]
    if indexed:
        indices = [placements[k] if isinstance(placements[k], np.ndarray)
                   else np.arange(int(placements[k]), int(placements[k]) + lengths[k], dtype=np.int64)
                   for k in indexed]
        places = perm(np.concatenate(indices)) - first
        for k, part in zip(indexed, np.split(places, np.cumsum([len(x) for x in indices])[:-1]), strict=True):
            out[k] = part
    return out


class WriteShardFn(beam.DoFn):
    """(shard, [(placement, Records)]) + plan -> shard info; records in permuted order, temp file + rename.

    The group is read once, an element at a time, its records put into a local spool at their places
    in the shard (pipeline/io/spool.py), and written from there in order: the writer holds one element of the
    group and one ~8 MB bucket, whatever the shard's size, as long as the runner hands the group
    over lazily (docs/operations.md: which runners do). When every record is a reference to a file of
    the job's sink (pipeline/io/sinks.py), only the references are held, and a sink that can gathers
    the shard straight from its files in order (DirectRunner's spill files while in the page cache).
    The sha256 is computed while writing.
    Shards go into the run's own directory (pipeline/io/outputs.py). A placement: see AssignShardsFn.
    """

    def __init__(self, config: PipelineConfig, record_bytes: int, run_id: str, sink: RecordSink | None = None):
        self._config = config
        self._record_bytes = record_bytes
        self._run_id = run_id
        self._sink = sink or KEEP

    def process(self, element, plan: ShardPlan):
        shard, groups = element
        first, end = (int(b) for b in plan.bounds()[shard : shard + 2])
        perm = Permutation(plan.num_records, self._config.seed)
        name = outputs.run_path(self._run_id, outputs.shard_name(self._config.split, shard, plan.num_shards))
        path = posixpath.join(self._config.output_dir, name)
        groups = iter(groups)
        spilled: list[tuple[bytes | int, SpilledRecords]] = []  # references only, while they are
        for placement, recs in groups:
            if not isinstance(recs, SpilledRecords):
                groups = itertools.chain([(placement, recs)], groups)
                break
            spilled.append(shard_members(placement, recs))
        else:
            places = shard_places([p for p, _ in spilled], [len(r) for _, r in spilled], perm, first)
            blocks = list(zip(places, (r for _, r in spilled), strict=True))
            written = self._sink.publish_gathered(path, blocks, end - first, self._record_bytes)
            if written is not None:
                yield self._written(name, end - first, *written)
                return
        with OrderedSpool(end - first, (end - first) * self._record_bytes) as spool, RecordReader() as reader:
            for placement, recs in itertools.chain(spilled, groups):
                placement, recs = shard_members(placement, recs)
                places = shard_places([placement], [len(recs)], perm, first)[0]
                spool.add_many(places, *reader.read_block(recs))
            size, sha = publish(path, spool)
        yield self._written(name, end - first, size, sha)

    @staticmethod
    def _written(name: str, records: int, size: int, sha: str) -> dict:
        counter("shards_written").inc()
        LOG.info("wrote %s: %d records, %.1f MB", name, records, size / 1e6)
        return {"path": name, "records": records, "bytes": size, "sha256": sha}


def summary_and_plan(totals: tuple[JobStats, list], shard_bytes: int, size: int) -> tuple[JobStats, ShardPlan]:
    """(the job's summed stats, the shard plan) from TotalsFn's output."""
    return totals_stats(totals), plan_shards(totals_offsets(totals), shard_bytes, size)


def placed_sources(totals: tuple[JobStats, list], shard_bytes: int, size: int):
    """(source, (its first record's global index, the plan)) of every record source, from TotalsFn's output."""
    offsets = totals_offsets(totals)
    plan = plan_shards(offsets, shard_bytes, size)
    for source, _ in totals[1]:
        yield source, (offsets.offset(source), plan)


class _OneSource:
    """The offset of one source, where AssignShardsFn expects every source's."""

    def __init__(self, offset: int):
        self._offset = offset

    def offset(self, _source) -> int:
        return self._offset


class AssignJoinedFn(beam.DoFn):
    """(source, [Records], (offset, plan)) -> (shard, (placement, Records)): AssignShardsFn without side inputs."""

    def __init__(self, seed: int):
        self._assign = AssignShardsFn(seed)

    def process(self, element):
        source, blocks, (offset, plan) = element
        fn = self._assign
        for recs in blocks:
            if plan.num_shards == 1:
                if len(recs):
                    yield 0, (offset, recs, plan)
                continue
            fn._side, fn._held = (_OneSource(offset), plan), [(source, recs)]  # noqa: SLF001
            fn._held_records = fn._held_bytes = 0  # noqa: SLF001
            for shard, (placement, part) in fn._assign():  # noqa: SLF001
                yield shard, (placement, part, plan)


class WriteJoinedShardFn(beam.DoFn):
    """(shard, [(placement, Records, plan)]) -> shard info: WriteShardFn with the plan in the elements."""

    def __init__(self, writer: WriteShardFn):
        self._writer = writer

    def process(self, element):
        shard, blocks = element
        blocks = list(blocks)
        plan = blocks[0][2]
        yield from self._writer.process((shard, [(placement, recs) for placement, recs, _ in blocks]), plan)
