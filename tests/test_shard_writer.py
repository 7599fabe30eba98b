"""The shard writer: records in permuted order, the same bytes from any kind of block, and memory
that does not grow with the shard (measured with tracemalloc on 8 MB and 512 MB shards)."""

import hashlib
import os
import tracemalloc

import numpy as np
import pytest

from pipeline.beam.runners.direct import spill
from pipeline.config.job import PipelineConfig
from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.core.sources import SourceOffsets, source_key
from pipeline.format.framing import FramedRecords, frame
from pipeline.io import spool as spool_module
from pipeline.io.spool import BUCKET_BYTES, OrderedSpool, SpoolError

RECORD_PAYLOAD = 16384  # ~ a seq_len 8192 record of uint16 tokens
RUN_ID = "0123456789abcdef"


def _config(out, seed: int = 0) -> PipelineConfig:
    return PipelineConfig(inputs=("x",), output_dir=str(out), tokenizer_model="m", seed=seed)


def _payload(position: int) -> bytes:
    return np.full(RECORD_PAYLOAD // 8, position, "<i8").tobytes()


def _groups(positions: np.ndarray, per_element: int):
    """(positions, FramedRecords) elements made on the fly, as a lazily iterated group arrives."""
    for start in range(0, len(positions), per_element):
        part = positions[start : start + per_element]
        yield part.astype("<i8").tobytes(), FramedRecords.of(_payload(p) for p in part.tolist())


def _expected_sha(first: int, end: int) -> str:
    digest = hashlib.sha256()
    for p in range(first, end):
        digest.update(frame(_payload(p)))
    return digest.hexdigest()


def _write(out, plan: ShardPlan, shard: int, groups, record_bytes: int) -> dict:
    from pipeline.beam.tfrecord.shards import WriteShardFn

    (info,) = WriteShardFn(_config(out), record_bytes, RUN_ID).process((shard, groups), plan)
    return info


def test_records_come_out_in_permuted_order_from_blocks_in_memory_or_in_spill_files(tmp_path):
    plan = ShardPlan(40, 3)
    first, end = plan.bounds()[1:3].tolist()
    positions = Permutation(40, seed=5)(np.arange(40))
    mine = positions[(positions >= first) & (positions < end)]
    writer = spill.SpillWriter(str(tmp_path))
    half = len(mine) // 2
    in_memory = FramedRecords.of(_payload(p) for p in mine[:half].tolist())
    spilled = writer.write(FramedRecords.of(_payload(p) for p in mine[half:][::-1].tolist())).take(
        range(len(mine) - half - 1, -1, -1))  # a reference that reorders, as AssignShards' take does
    writer.close()
    groups = [(mine[half:].astype("<i8").tobytes(), spilled), (mine[:half].astype("<i8").tobytes(), in_memory)]
    info = _write(tmp_path / "out", plan, 1, groups, RECORD_PAYLOAD + 16)
    data = (tmp_path / "out" / info["path"]).read_bytes()
    assert info["path"] == f"run-{RUN_ID}/train-00001-of-00003.tfrecord" and info["records"] == end - first
    assert data == b"".join(frame(_payload(p)) for p in range(first, end))
    assert info["sha256"] == hashlib.sha256(data).hexdigest() and info["bytes"] == len(data)


@pytest.mark.parametrize("spilled", [False, True])
def test_one_shard_placed_by_its_blocks_first_indices_is_the_same_shard(tmp_path, spilled):
    """With one shard, AssignShards sends each block's first global index, not its positions: same bytes."""
    from pipeline.beam.tfrecord.shards import AssignShardsFn, WriteShardFn

    n, seed, sizes = 57, 0, [10, 0, 25, 22]  # records per source, in source order
    plan = ShardPlan(n, 1)
    sources = [(0, 0, 0, k) for k in range(len(sizes))]
    offsets = SourceOffsets.from_counts(list(zip(sources, sizes, strict=True)))
    writer = spill.SpillWriter(str(tmp_path / "spill"))
    os.makedirs(tmp_path / "spill")
    elements, by_positions = [], []
    for source, count in zip(sources, sizes, strict=True):
        index = offsets.offset(source) + np.arange(count)
        block = FramedRecords.of(_payload(int(i)) for i in index.tolist())
        recs = writer.write(block) if spilled else block
        elements += list(AssignShardsFn(seed).process((source, recs), offsets, plan))
        if count:  # as AssignShards, which sends no empty block
            by_positions.append((Permutation(n, seed)(index).astype("<i8").tobytes(), recs))
    writer.close()
    assert all(isinstance(placement, int) for _, (placement, _) in elements)  # not the positions
    sink = spill.SpillSink(str(tmp_path / "spill")) if spilled else None
    (placed,) = WriteShardFn(_config(tmp_path / "a"), RECORD_PAYLOAD + 16, RUN_ID, sink).process(
        (0, [value for _, value in elements]), plan)
    (positioned,) = WriteShardFn(_config(tmp_path / "b"), RECORD_PAYLOAD + 16, RUN_ID).process((0, by_positions), plan)
    data = (tmp_path / "a" / placed["path"]).read_bytes()
    order = Permutation(n, seed).inverse(np.arange(n))  # the index of the record at each position
    assert data == (tmp_path / "b" / positioned["path"]).read_bytes()
    assert data == b"".join(frame(_payload(int(i))) for i in order)


@pytest.mark.parametrize("limit", ["records", "bytes"])
@pytest.mark.parametrize("spilled,cached", [(False, False), (True, True), (True, False)])
def test_several_shards_from_blocks_assigned_in_batches_are_the_permuted_records(tmp_path, monkeypatch,
                                                                                 spilled, cached, limit):
    """AssignShards permutes a bundle's blocks together (here in batches of 40 records, or of what
    holds ~40 records in memory): a spilled block split between shards goes to each whole with the
    indices of its records there, a block in memory is split into records placed by their positions;
    every shard holds exactly its records, in order."""
    from pipeline.beam.tfrecord import shards as tfrecord_shards
    from pipeline.beam.tfrecord.shards import WriteShardFn

    n, seed, sizes = 157, 3, [30, 0, 45, 22, 60]
    plan = ShardPlan(n, 4)
    sources = [(0, 0, 0, k) for k in range(len(sizes))]
    offsets = SourceOffsets.from_counts(list(zip(sources, sizes, strict=True)))
    os.makedirs(tmp_path / "spill")
    writer = spill.SpillWriter(str(tmp_path / "spill"))
    held_bytes = 40 * len(frame(_payload(0)))
    assign_fn = tfrecord_shards.AssignShardsFn
    monkeypatch.setattr(assign_fn, "ASSIGN_BATCH_RECORDS", 40 if limit == "records" else 1 << 30)
    monkeypatch.setattr(assign_fn, "ASSIGN_BATCH_BYTES", held_bytes if limit == "bytes" else 1 << 30)
    monkeypatch.setattr(spill, "likely_cached", lambda spill_dir: cached)
    assign = tfrecord_shards.AssignShardsFn(seed)
    assign.start_bundle()
    elements = []
    for source, count in zip(sources, sizes, strict=True):
        block = FramedRecords.of(_payload(int(i)) for i in (offsets.offset(source) + np.arange(count)).tolist())
        elements += list(assign.process((source, writer.write(block) if spilled else block), offsets, plan))
        assert assign._held_records < (40 if limit == "records" else 1 << 30)
        assert assign._held_bytes < held_bytes  # spilled blocks hold no records in memory
    elements += [windowed.value for windowed in assign.finish_bundle()]
    writer.close()
    placements = [placement for _, (placement, _) in elements]
    if spilled:  # nothing per record crosses the shuffle but the indices of a split block's records
        assert all(isinstance(p, int) or isinstance(p, tuple) for p in placements)
        assert any(isinstance(p, tuple) for p in placements)
    else:
        assert all(isinstance(p, bytes | int) for p in placements)
    order = Permutation(n, seed).inverse(np.arange(n))  # the index of the record at each position
    bounds = plan.bounds().tolist()
    for shard in range(plan.num_shards):
        group = [value for key, value in elements if key == shard]
        (info,) = WriteShardFn(_config(tmp_path / "out", seed), RECORD_PAYLOAD + 16, RUN_ID,
                               spill.SpillSink(str(tmp_path / "spill")) if spilled else None).process((shard, group),
                                                                                                       plan)
        data = (tmp_path / "out" / info["path"]).read_bytes()
        assert data == b"".join(frame(_payload(int(i))) for i in order[bounds[shard] : bounds[shard + 1]])


@pytest.mark.parametrize("problem", ["missing", "twice", "outside"])
def test_a_group_that_does_not_cover_its_shard_exactly_writes_nothing(tmp_path, problem):
    plan = ShardPlan(10, 1)
    positions = np.arange(10)
    if problem == "missing":
        positions = positions[:-1]
    elif problem == "twice":
        positions = np.concatenate([positions[:-1], [3]])
    else:
        positions = np.concatenate([positions[:-1], [10]])
    with pytest.raises(SpoolError):
        _write(tmp_path / "out", plan, 0, list(_groups(positions, 4)), RECORD_PAYLOAD + 16)
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []  # at most an empty run directory


def test_spool_keeps_sparse_places_in_order_and_refuses_repeats(tmp_path):
    with OrderedSpool(100, total_bytes=10 << 20, dense=False, directory=str(tmp_path), bucket_bytes=1 << 20) as spool:
        for place in (70, 3, 99, 0):
            spool.add(place, f"<{place}>".encode())
        assert b"".join(spool) == b"<0><3><70><99>"
    assert os.listdir(tmp_path) == []  # bucket files removed
    with OrderedSpool(5, total_bytes=5, dense=False) as spool, pytest.raises(SpoolError, match="twice"):
        spool.add(2, b"a")
        spool.add(2, b"b")
        list(spool)


def _items(n: int, sizes) -> tuple[list[bytes], bytes, np.ndarray, np.ndarray]:
    """n items of `sizes` (one or per item), at shuffled offsets of one buffer with gaps between them."""
    rng = np.random.default_rng(n)
    sizes = np.broadcast_to(sizes, n)
    items = [rng.integers(0, 256, int(size), np.uint8).tobytes() for size in sizes]
    layout = rng.permutation(n)
    buffer, starts = b"", np.zeros(n, np.int64)
    for i in layout.tolist():
        buffer += b"gap"
        starts[i] = len(buffer)
        buffer += items[i]
    return items, buffer, starts, starts + sizes


@pytest.mark.parametrize("sizes", ["mixed", "uniform"])
def test_spool_add_many_gives_the_same_bytes_as_adding_items_one_by_one(tmp_path, monkeypatch, sizes):
    monkeypatch.setattr(spool_module, "PIECE_BYTES", 300)  # several pieces per bucket
    n = 1000
    items, buffer, starts, ends = _items(n, np.arange(1000) % 53 if sizes == "mixed" else 37)
    places = np.random.default_rng(1).permutation(n)
    expected = b"".join(items[i] for i in np.argsort(places).tolist())
    total = int((ends - starts).sum())
    with OrderedSpool(n, total, directory=str(tmp_path), bucket_bytes=2000) as one_by_one:
        for i in range(n):
            one_by_one.add(int(places[i]), items[i])
        assert b"".join(one_by_one) == expected
    with OrderedSpool(n, total, directory=str(tmp_path), bucket_bytes=2000) as spool:
        for lo in range(0, n, 170):
            spool.add_many(places[lo : lo + 170], buffer, starts[lo : lo + 170], ends[lo : lo + 170])
        spool.add_many(places[:0], b"", starts[:0], ends[:0])
        assert len(spool) == n
        pieces = list(spool)
    assert b"".join(pieces) == expected
    assert max(map(len, pieces)) <= 300 + 53 and len(pieces) > total // 350
    # Both ways in one spool, and a sparse one.
    with OrderedSpool(n, total, bucket_bytes=2000) as spool:
        spool.add_many(places[1:], np.frombuffer(buffer, np.uint8), starts[1:], ends[1:])
        spool.add(int(places[0]), items[0])
        assert b"".join(spool) == expected
    with OrderedSpool(5 * n, total, dense=False, bucket_bytes=2000) as spool:
        chosen = np.arange(n)[::-3]
        spool.add_many(places[chosen] * 5, buffer, starts[chosen], ends[chosen])
        assert b"".join(spool) == b"".join(items[i] for i in chosen[np.argsort(places[chosen])].tolist())


@pytest.mark.parametrize("problem", ["missing", "twice", "twice in one batch", "negative", "past the end"])
def test_spool_add_many_refuses_places_that_do_not_cover_the_group(problem):
    items, buffer, starts, ends = _items(10, 4)
    places = np.arange(10)
    if problem == "missing":
        places, starts, ends = places[:-1], starts[:-1], ends[:-1]
    elif problem == "twice in one batch":
        places = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 8])
    elif problem in ("negative", "past the end"):
        places = np.array([-1 if problem == "negative" else 10, *range(1, 10)])
    message = {"missing": "9 items", "negative": "outside", "past the end": "outside"}.get(problem, "twice")
    with OrderedSpool(10, 40, bucket_bytes=8) as spool, pytest.raises(SpoolError, match=message):
        if problem == "twice":
            spool.add_many(places[:5], buffer, starts[:5], ends[:5])
            spool.add_many([4, *places[6:]], buffer, starts[5:], ends[5:])
        else:
            spool.add_many(places, buffer, starts, ends)
        list(spool)


def _peak_while_writing(out, shard_mb: int) -> tuple[int, dict, str]:
    num_records = shard_mb * (1 << 20) // (RECORD_PAYLOAD + 16)
    plan = ShardPlan(num_records, 1)
    positions = Permutation(num_records, seed=1)(np.arange(num_records))
    tracemalloc.start()
    try:
        info = _write(out, plan, 0, _groups(positions, 64), RECORD_PAYLOAD + 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, info, _expected_sha(0, num_records)


@pytest.mark.slow
def test_writer_memory_does_not_grow_with_the_shard(tmp_path):
    """Peak Python memory while writing shards of 8 MB and 512 MB: one element + one spool bucket.

    The group is a generator (the lazily paged group Dataflow hands over), elements of 64 records
    (~1 MB). Before the spool the writer held the whole group: 512+ MB here.
    """
    small_peak, small, small_sha = _peak_while_writing(tmp_path / "small", 8)
    large_peak, large, large_sha = _peak_while_writing(tmp_path / "large", 512)
    assert small["sha256"] == small_sha and large["sha256"] == large_sha  # bytes in permuted order
    assert large["bytes"] > 500 << 20
    element = 64 * (RECORD_PAYLOAD + 16) * 2  # its payloads and its framed block
    bound = BUCKET_BYTES + element + (2 << 20)
    print(f"peak Python memory: 8 MB shard {small_peak / 2**20:.1f} MiB, 512 MB shard {large_peak / 2**20:.1f} MiB")
    assert small_peak < bound and large_peak < bound
    assert large_peak < 0.03 * large["bytes"]


def test_source_offsets_follow_the_tuple_order_of_sources():
    sources = [(k, c, f, ch) for k in range(3) for c in (0, 2) for f in (0, 7, 1 << 20) for ch in (0, 5, 1 << 30)]
    assert sorted(sources, key=source_key) == sorted(sources)
    counts = [(s, i % 4) for i, s in enumerate(sources[::-1])]
    table = SourceOffsets.from_counts(counts)
    running = 0
    for source, n in sorted(counts):
        assert table.offset(source) == running
        running += n
    assert table.num_records == running
    with pytest.raises(KeyError):
        table.offset((1, 1, 1, 1))
    with pytest.raises(ValueError, match="outside"):
        source_key((0, 256, 0, 0))
    with pytest.raises(ValueError, match="twice"):
        SourceOffsets.from_counts([((0, 0, 0, 0), 1), ((0, 0, 0, 0), 2)])


@pytest.mark.slow
def test_concatenated_shards_are_the_same_bytes_whatever_the_shard_size(tmp_path, tiny_model):
    """Shard i holds permuted positions [bounds[i], bounds[i+1]) in order: the size only moves the cuts."""
    from corpus_helpers import FAST_BEAM
    from sample_corpus import write_sample_corpus

    from pipeline.cli import run

    write_sample_corpus(str(tmp_path / "pile"), train_files=2, docs_per_file=30)
    streams = []
    for shard_mb in ("0.05", "0.3"):
        out = tmp_path / f"out-{shard_mb}"
        manifest = run.main(["--input", str(tmp_path / "pile" / "train" / "*.jsonl.zst"), "--output_dir", str(out),
                             "--tokenizer_model", tiny_model, "--seq_len", "64", "--shard_size_mb", shard_mb,
                             *FAST_BEAM])
        streams.append((len(manifest["shards"]), b"".join((out / s["path"]).read_bytes() for s in manifest["shards"])))
    (many, first), (few, second) = streams
    assert many > few >= 1 and first == second
