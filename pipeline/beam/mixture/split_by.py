"""`--split_by LABEL`: one TFRecord output per bucket of a stage's label, the stages run once, and a mixture.json.

The chunks are read, validated, decided by the stages and tokenized once; the engine routes each
kept document to its bucket (pipeline/process/documents.py) and packs each bucket's documents
apart (pipeline/process/tfrecord.py). From there every bucket is an output of its own: its tails
joined within it, its last record, its record count and shard plan, its shuffle, shards and manifest
in OUT/<label>=<value>/, the same bytes as a run that kept only its documents. Dead letters and
removed/ records belong to the run, not a bucket: they go to OUT/run-<id>/, listed in
OUT/buckets.json (pipeline/beam/mixture/split_outputs.py writes it, the manifests and mixture.json).

Element shapes (bucket: a kept document's value of the label, pipeline/format/buckets.py; source_id
as pipeline/beam/tfrecord/output.py's, the bucket before it):
  Chunk                               -> BucketChunkFn -> ((bucket, *source_id), Records)
                                                        + TAILS ((bucket, copy, file), (chunk, Piece))
                                                        + STATS: the run's JobStats, BucketStats per bucket
                                                        + COUNTS ((bucket, *source_id), n) + dead letters,
                                                          REMOVED, PROVENANCE ((bucket, *source_id), n, spans)
  ((bucket, copy, file), [(chunk, Piece)]) -> BucketTailsFn -> ((bucket, 1, copy, file, 0), Records)
                                                        + TAILS (bucket, ((copy, file), Piece))
  (bucket, [((copy, file), Piece)])    -> BucketFinalFn -> ((bucket, 2, 0, 0, 0), Records)
  read stats + STATS + COUNTS + removed/ files -> SplitTotalsFn -> (run JobStats, {bucket: JobStats},
                                                                    [((bucket, *source_id), n)])
  totals                              -> placed_sources -> ((bucket, *source_id), (offset, plan)) per source
  ((bucket, *source_id), [Records], (offset, plan)) -> AssignBucketFn -> ((bucket, shard), (placement, Records, plan))
  ((bucket, shard), [...])            -> WriteBucketShardFn -> (bucket, shard info)
  everything, gathered                -> split_outputs.write_outputs -> bucket manifests, buckets.json, mixture.json
The offsets and plans are joined to the blocks by source on every runner (no side inputs): one graph
wherever it runs. The bucket directories are checked (`buckets.directories`) before any shard is
written: two values that would share one fail the job, naming them.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipeline.beam.chunk_documents import COUNTS, DEAD_LETTERS, WriteDeadLetters, emitted
from pipeline.beam.execution import Workspace
from pipeline.beam.graph import gather, join_each, multi_output, outputs_of
from pipeline.beam.mixture.split_outputs import bucket_config, parts, prepare, summary, write_outputs
from pipeline.beam.preflight import Job
from pipeline.beam.read import STATS, chunk_stage, counter, reporter
from pipeline.beam.removed import REMOVED, removed_files
from pipeline.beam.tfrecord.output import WriteProvenanceFn, record_bytes
from pipeline.beam.tfrecord.pack import PROVENANCE, TAILS, PackFinalFn, PackTailsFn, ProcessChunkFn
from pipeline.beam.tfrecord.shards import AssignJoinedFn, WriteJoinedShardFn, WriteShardFn, plan_shards
from pipeline.config.job import PipelineConfig
from pipeline.core.errors import JobError
from pipeline.core.sources import SourceOffsets
from pipeline.core.stats import JobStats
from pipeline.format import buckets
from pipeline.process import tfrecord
from pipeline.process.tfrecord import packs_best_fit

__all__ = ["build", "parts", "prepare", "summary"]


@dataclasses.dataclass
class BucketStats:
    """A bucket's counts from one step (its documents' in a work item, or its tails' packing)."""

    bucket: str
    stats: JobStats


def _block_out(sink, bucket: str, block):
    source = (bucket, *block.source)
    yield source, emitted(sink, block.records, source)
    yield beam.pvalue.TaggedOutput(COUNTS, (source, len(block.records)))
    if block.spans is not None:
        yield beam.pvalue.TaggedOutput(PROVENANCE, (source, len(block.records), block.spans))


class BucketChunkFn(ProcessChunkFn):
    """Chunk -> each bucket's packed records and tails, the run's counts and each bucket's."""

    def _blocks_out(self, result):
        for block in result.blocks:
            self._records.inc(len(block.records))
            yield from _block_out(self._sink, block.bucket, block)
        for tail in result.tails:
            yield beam.pvalue.TaggedOutput(TAILS, ((tail.bucket, tail.copy, result.file_index),
                                                   (result.chunk_index, tail.piece)))
        for bucket, stats in sorted(result.buckets.items()):
            yield beam.pvalue.TaggedOutput(STATS, BucketStats(bucket, stats))


def _joined_out(sink, bucket: str, joined: tfrecord.Joined):
    if joined.block is not None:
        yield from _block_out(sink, bucket, joined.block)
    yield beam.pvalue.TaggedOutput(STATS, BucketStats(bucket, JobStats(packing=joined.stats)))


class BucketTailsFn(PackTailsFn):
    """((bucket, copy, file), [(chunk, Piece)]) -> the bucket's records of the joined tails, and the remainder."""

    def process(self, element):
        (bucket, copy_index, file_index), tails = element
        joined = tfrecord.pack_tails(self._config, self._special, copy_index, file_index, list(tails))
        counter("records_from_tails").inc(joined.stats.records_from_tails)
        if len(joined.remainder):
            yield beam.pvalue.TaggedOutput(TAILS, (bucket, ((copy_index, file_index), joined.remainder)))
        yield from _joined_out(self._sink, bucket, joined)


class BucketFinalFn(PackFinalFn):
    """(bucket, [((copy, file), Piece)]) -> the bucket's last records, and its one partial record."""

    def process(self, element):
        bucket, tails = element
        yield from _joined_out(self._sink, bucket, tfrecord.pack_final(self._config, self._special, list(tails)))


class SplitTotalsFn(beam.CombineFn):
    """STATS (the run's JobStats or read stats, BucketStats) and COUNTS -> (run, {bucket: stats}, counts)."""

    def create_accumulator(self):
        return JobStats(), {}, []

    def add_input(self, accumulator, element):
        run, by_bucket, counts = accumulator
        if isinstance(element, BucketStats):
            by_bucket.setdefault(element.bucket, JobStats()).merge(element.stats)
        elif isinstance(element, JobStats | dict):
            run.merge(JobStats.of(element))
        else:
            counts.append(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        run, by_bucket, counts = self.create_accumulator()
        for more_run, more_buckets, more_counts in accumulators:
            run.merge(more_run)
            for bucket, stats in more_buckets.items():
                by_bucket.setdefault(bucket, JobStats()).merge(stats)
            counts += more_counts
        return run, by_bucket, counts

    def extract_output(self, accumulator):
        return accumulator


def bucket_plans(totals: tuple, config: PipelineConfig, size: int) -> dict[str, tuple[SourceOffsets, object]]:
    """{bucket: (its sources' offsets, its shard plan)} from the totals; the bucket directories checked first.

    Raises:
        JobError: two buckets whose directories would be one (pipeline/format/buckets.py).
    """
    _, by_bucket, counts = totals
    try:
        buckets.directories(config.split_by, buckets.ordered(by_bucket))
    except buckets.BucketError as e:
        raise JobError(f"{e}; no shard was written") from None
    per: dict[str, list] = {}
    for (bucket, *source), n in counts:
        per.setdefault(bucket, []).append((tuple(source), n))
    plans = {}
    for bucket, items in per.items():
        offsets = SourceOffsets.from_counts(items)
        plans[bucket] = (offsets, plan_shards(offsets, config.shard_bytes, size))
    return plans


def placed_sources(totals: tuple, config: PipelineConfig, size: int):
    """((bucket, *source_id), (its first record's index in its bucket, the bucket's plan)) of every source."""
    plans = bucket_plans(totals, config, size)
    for (bucket, *source), _ in totals[2]:
        offsets, plan = plans[bucket]
        yield (bucket, *source), (offsets.offset(tuple(source)), plan)


class AssignBucketFn(AssignJoinedFn):
    """((bucket, *source_id), [Records], (offset, plan)) -> ((bucket, shard), (placement, Records, plan))."""

    def process(self, element):
        (bucket, *source), blocks, placed = element
        for shard, value in super().process((tuple(source), blocks, placed)):
            yield (bucket, shard), value


class WriteBucketShardFn(beam.DoFn):
    """((bucket, shard), [(placement, Records, plan)]) -> (bucket, shard info), in the bucket's own directory."""

    def __init__(self, config: PipelineConfig, record_bytes: int, run_id: str, sink):
        self._config, self._record_bytes, self._run_id, self._sink = config, record_bytes, run_id, sink

    def process(self, element):
        (bucket, shard), blocks = element
        writer = WriteShardFn(bucket_config(self._config, bucket), self._record_bytes, self._run_id, self._sink)
        for info in WriteJoinedShardFn(writer).process((shard, blocks)):
            yield bucket, info


class WriteBucketProvenanceFn(beam.DoFn):
    """((bucket, file or -1), [((bucket, *source_id), n, spans)]) -> (bucket, provenance file info)."""

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config, self._run_id = config, run_id

    def process(self, element):
        (bucket, file_index), blocks = element
        writer = WriteProvenanceFn(bucket_config(self._config, bucket), self._run_id)
        for info in writer.process((file_index, [(tuple(source[1:]), n, spans) for source, n, spans in blocks])):
            yield bucket, info


def _provenance_key(block):
    source = block[0]
    return (source[0], source[3] if source[1] < 2 else -1), block


def build(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace) -> beam.PCollection:
    """Add the split job to `p` from the read stage's outputs: one element, mixture.json's path, once written."""
    cfg, sink, runtime = job.config, workspace.sink, workspace.runtime
    processed = chunk_stage(
        chunks, "TokenizeAndPack",
        BucketChunkFn(cfg, job.tokenizer, job.execution.encode_threads, sink, reporter(job, workspace),
                      encode_batch_bytes=job.execution.encode_batch_bytes),
        TAILS, DEAD_LETTERS, STATS, COUNTS, PROVENANCE, REMOVED, main="records", runtime=runtime)
    stages = [processed]
    if not packs_best_fit(cfg):  # concat: each bucket's tails joined per file, then its last records
        file_tails = multi_output(
            processed[TAILS] | "GroupTailsByFile" >> beam.GroupByKey(),  # ((bucket, copy, file), [(chunk, Piece)])
            "PackTails", BucketTailsFn(cfg, job.tokenizer.special, sink), TAILS, STATS, COUNTS, PROVENANCE,
            main="records", runtime=runtime)
        final = multi_output(
            file_tails[TAILS] | "GroupLastTails" >> beam.GroupByKey(),  # (bucket, [((copy, file), Piece)])
            "PackFinal", BucketFinalFn(cfg, job.tokenizer.special, sink), STATS, COUNTS, PROVENANCE,
            main="records", runtime=runtime)
        stages += [file_tails, final]
    all_records = tuple(stage.records for stage in stages) | "AllRecords" >> beam.Flatten()
    counted = [pc for stage in stages for pc in outputs_of(stage, STATS, COUNTS)]
    totals = (
        tuple(pc for pc in (read_stats, *counted, *removed_files(cfg, job.run_id, processed)) if pc is not None)
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(SplitTotalsFn()).without_defaults()
    )
    size = record_bytes(job)
    placed = totals | "PlaceSources" >> beam.FlatMap(placed_sources, cfg, size)
    shards = (
        join_each("JoinSources", all_records, placed)  # ((bucket, *source), [Records], (offset, plan))
        | "AssignShards" >> beam.ParDo(AssignBucketFn(cfg.seed))
        | "GroupByShard" >> beam.GroupByKey()  # ((bucket, shard), [(placement, Records, plan)])
        | "WriteShards" >> beam.ParDo(WriteBucketShardFn(cfg, size, job.run_id, sink))
    )
    dead = processed[DEAD_LETTERS] | "WriteDeadLetters" >> WriteDeadLetters(cfg, job.run_id)
    written = {"shards": shards, "totals": totals, "dead_letters": dead}
    if cfg.provenance:
        written["provenance"] = (
            tuple(stage[PROVENANCE] for stage in stages)
            | "AllProvenance" >> beam.Flatten()
            | "KeyProvenanceByFile" >> beam.Map(_provenance_key)  # ((bucket, file or -1), block)
            | "GroupProvenance" >> beam.GroupByKey()
            | "WriteProvenance" >> beam.ParDo(WriteBucketProvenanceFn(cfg, job.run_id))
        )
    # Every bucket's manifest, then buckets.json, then mixture.json: last, once every shard is written.
    return gather("Written", **written) | "WriteOutputs" >> beam.Map(write_outputs, job, size)
