"""Records through local spill files (DirectRunner): same bytes back, and nothing left behind."""

import hashlib
import os
import time

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines

from pipeline.beam.runners.direct import spill
from pipeline.cli import run
from pipeline.core.documents import Line
from pipeline.format.framing import FramedRecords
from pipeline.io import localfs, record_files
from pipeline.io.inputs import Chunk


def _records(n, start=0):
    return [f"record {i} ".encode() * (1 + i % 5) for i in range(start, start + n)]


def test_spilled_blocks_read_back_as_the_same_framed_records(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    first, second = FramedRecords.of(_records(7)), FramedRecords.of(_records(5, start=7))
    ref1, ref2 = writer.write(first), writer.write(second)
    writer.close()
    assert ref1.path == ref2.path and len(ref1) == 7 and len(ref2) == 5
    assert ref1.load().data == first.data and ref2.load().data == second.data
    assert np.array_equal(ref2.load().ends, second.ends)
    # A subset in any order, with gaps: the same records as taking from the block itself.
    picked = [6, 0, 1, 2, 4]
    assert record_files.load(ref1.take(picked)).data == first.take(picked).data
    assert record_files.load(first) is first
    assert len(ref1.take([]).load()) == 0


def _python_calls_while_pickling(value) -> list[str]:
    """The Python functions that run while `value` is pickled."""
    import pickle
    import sys

    called = []
    sys.setprofile(lambda frame, event, arg: called.append(frame.f_code.co_name) if event == "call" else None)
    try:
        pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    finally:
        sys.setprofile(None)
    return called


def test_a_packed_blocks_reference_pickles_as_four_numbers(tmp_path):
    """What crosses the shuffle per block of records does not grow with them (nor run Python to pickle)."""
    import pickle

    writer = spill.SpillWriter(str(tmp_path))
    block = writer.write(FramedRecords.of(bytes([i % 251]) * 40 for i in range(3000)))  # a packed block's
    varied = writer.write(FramedRecords.of(_records(50)))
    writer.close()
    assert block.bounds is None and len(pickle.dumps(block)) < len(block.path) + 150
    assert _python_calls_while_pickling(block) == []
    reordered = block.take([5, 1, 9])
    assert reordered.bounds is not None and reordered.starts.tolist() == block.starts[[5, 1, 9]].tolist()
    assert varied.bounds is not None and len(varied) == 50
    for ref in (block, reordered, varied):
        copy = pickle.loads(pickle.dumps(ref))
        assert len(copy) == len(ref) and copy.load().data == ref.load().data


def _chunk(index, lines):
    return Chunk(3, index, "s3://bucket/in.jsonl.zst", tuple(lines), input_bytes=1234 + index)


def test_a_spilled_chunk_loads_as_the_chunk_it_was(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    lines = [Line(1, 0, b'{"text": "a"}', input_end=10), Line(2, 14, b"", input_end=11),
             Line(7, 15, "caf\u00e9 \U0001d518".encode(), oversized=1 << 30, input_end=99),
             Line(8, 40, bytes(range(256)) * 100, input_end=120)]
    first, empty, second = _chunk(0, lines), _chunk(1, []), _chunk(2, lines[::-1])
    refs = [record_files.spill_chunk(writer, c) for c in (first, empty, second)]
    writer.close()
    assert len({r.spill_path for r in refs}) == 1 and refs[1].lines == 0
    for ref, chunk in zip(refs, (first, empty, second), strict=True):
        assert ref.load() == chunk and record_files.load_chunk(ref) == chunk
    assert record_files.load_chunk(first) is first
    assert record_files.spillable(first) and not record_files.spillable(_chunk(4, [Line(1, 0, b"x", row={"text": 1})]))
    os.truncate(refs[2].spill_path, refs[2].end - 1)
    with pytest.raises(OSError, match="shorter|damaged"):
        refs[2].load()
    assert refs[0].load() == first


def test_a_truncated_spill_file_is_an_error_not_short_data(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    ref = writer.write(FramedRecords.of(_records(4)))
    writer.close()
    os.truncate(ref.path, int(ref.ends[-1]) - 1)
    with pytest.raises(OSError, match="shorter"):
        ref.load()


def _records_of(buffer, starts, ends) -> list[bytes]:
    return [bytes(buffer[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def _counting_preads(monkeypatch) -> list[int]:
    sizes = []
    real_pread = os.pread

    def pread(fd, n, offset):
        sizes.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(spill.os, "pread", pread)
    return sizes


def test_read_block_gives_all_records_of_either_kind_with_one_read_when_dense(tmp_path, monkeypatch):
    block = FramedRecords.of(_records(9))
    expected = [bytes(block.framed(i)) for i in range(9)]
    writer = spill.SpillWriter(str(tmp_path))
    writer.write(FramedRecords.of(_records(3, start=100)))  # the block does not start the file
    ref = writer.write(block)
    writer.close()
    reads = _counting_preads(monkeypatch)
    with record_files.RecordReader() as reader:
        assert _records_of(*reader.read_block(block)) == expected
        assert reads == []
        assert _records_of(*reader.read_block(ref)) == expected
        picked = [8, 2, 3, 0]  # a reordering subset that spans most of the block
        assert _records_of(*reader.read_block(ref.take(picked))) == [expected[i] for i in picked]
        buffer, starts, ends = reader.read_block(ref.take([]))
        assert len(buffer) == len(starts) == len(ends) == 0
    assert len(reads) == 2 and reads[0] == len(block.data)


def test_read_block_reads_only_the_records_of_a_sparse_subset(tmp_path, monkeypatch):
    """A block split among many shards: each writer reads its records, not the block's span."""
    records = [bytes([i % 251]) * 1000 for i in range(4000)]  # ~4 MB
    writer = spill.SpillWriter(str(tmp_path))
    ref = writer.write(FramedRecords.of(records))
    writer.close()
    picked = [0, 1, 2, *range(100, 4000, 400), 3999, 3998, 7]  # runs of consecutive records count once
    reads = _counting_preads(monkeypatch)
    with record_files.RecordReader() as reader:
        buffer, starts, ends = reader.read_block(ref.take(picked))
    framed = FramedRecords.of(records)
    assert _records_of(buffer, starts, ends) == [bytes(framed.framed(i)) for i in picked]
    assert len(reads) == len(picked) - 2 and sum(reads) == len(buffer) == int((ends - starts).sum())
    os.truncate(ref.path, int(ref.ends[-1]) - 1)
    with record_files.RecordReader() as reader, pytest.raises(OSError, match="shorter"):
        reader.read_block(ref.take(picked))
    with record_files.RecordReader() as reader, pytest.raises(OSError, match="shorter"):
        reader.read_block(ref)


def test_spill_dir_is_hidden_in_a_local_output_and_removed(tmp_path):
    path = spill.make_spill_dir(str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith(".spill.tmp-")
    open(os.path.join(path, "x.records"), "wb").close()
    spill.remove_spill_dir(path)
    assert os.listdir(tmp_path) == []
    remote = spill.make_spill_dir("memory://bucket/out")  # not a local path: a local temp dir
    assert os.path.isdir(remote) and not remote.startswith("memory:")
    spill.remove_spill_dir(remote)
    assert not os.path.exists(remote)


@pytest.mark.slow
def test_direct_runner_moves_records_through_spill_files_and_cleans_up(tmp_path, tiny_model, monkeypatch):
    """The pipeline really spills on DirectRunner (in_memory mode runs the DoFns in this process)."""
    written = []
    real_write = spill.SpillWriter.write

    def counting_write(self, block):
        ref = real_write(self, block)
        written.append((os.path.dirname(ref.path), len(ref)))
        return ref

    monkeypatch.setattr(spill.SpillWriter, "write", counting_write)
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line(f"document {i} " * 40) for i in range(60)])
    out = tmp_path / "out"
    manifest = run.main(["--input", path, "--output_dir", str(out), "--tokenizer_model", tiny_model,
                         "--seq_len", "32", *FAST_BEAM])
    assert sum(n for _, n in written) == manifest["totals"]["records"] > 0
    assert {d for d, _ in written} and all(os.path.basename(d).startswith(".spill.tmp-") for d, _ in written)
    run_dir = f"run-{manifest['run_id']}"
    assert sorted(os.listdir(out)) == ["dataset_info.json", "features.json", "manifest.json", run_dir]
    assert os.listdir(out / run_dir) == ["train-00000-of-00001.tfrecord"]



def _spilled_shard(tmp_path, n=300, size=24, files=3, seed=0):
    """n records of `size` bytes in `files` spill files, with their permuted places in a shard of n."""
    rng = np.random.default_rng(seed)
    records = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]
    writers = [spill.SpillWriter(str(tmp_path)) for _ in range(files)]
    places = rng.permutation(n)
    blocks = []
    for k, lo in enumerate(range(0, n, 40)):
        chunk = records[lo:lo + 40]
        block = FramedRecords(b"".join(chunk), np.cumsum([size] * len(chunk), dtype=np.int64))
        blocks.append((places[lo:lo + 40], writers[k % files].write(block)))
    for w in writers:
        w.close()
    in_order = [None] * n
    for i, place in enumerate(places):
        in_order[place] = records[i]
    return blocks, b"".join(in_order)


@pytest.mark.parametrize("files", [1, 3])
def test_ordered_pieces_gathers_a_shard_in_place_order_from_the_spill_files(tmp_path, files):
    from pipeline.io.spool import OrderedSpool

    blocks, expected = _spilled_shard(tmp_path, files=files)
    pieces = [bytes(p) for p in spill.ordered_pieces(blocks, 300, 24, piece_bytes=1000)]
    assert b"".join(pieces) == expected and len(pieces) == -(-300 // (1000 // 24))
    # Records of other sizes among them (a padded last record is longer).
    odd = FramedRecords(b"A" * 30 + b"B" * 7, np.array([30, 37], np.int64))
    writer = spill.SpillWriter(str(tmp_path))
    extra = writer.write(odd)
    writer.close()
    mixed = [(p + 2, r) for p, r in blocks] + [(np.array([1, 0]), extra)]
    assert b"".join(bytes(p) for p in spill.ordered_pieces(mixed, 302, 24, piece_bytes=1000)) == (
        b"B" * 7 + b"A" * 30 + expected)
    # The same bytes as the spool's way.
    with OrderedSpool(300, 300 * 24) as spool, record_files.RecordReader() as reader:
        for places, recs in blocks:
            spool.add_many(places, *reader.read_block(recs))
        assert b"".join(spool) == expected


def test_pieces_from_a_pool_reuse_buffers_only_once_written(tmp_path, monkeypatch):
    from pipeline.io import publish as publish_module
    from pipeline.io.publish import publish

    (tmp_path / "spill").mkdir()
    blocks, expected = _spilled_shard(tmp_path / "spill", n=3000, files=3, seed=4)
    pool = spill.PiecePool()
    made = []
    take = pool.take
    monkeypatch.setattr(pool, "take", lambda n: made.append(n) or take(n))
    writes = []
    real_write = publish_module._DirectFile.write

    def slow_write(self, part):  # the writer lags behind: the gather must not refill a piece in flight
        time.sleep(0.002)
        writes.append(bytes(part))
        real_write(self, part)

    monkeypatch.setattr(publish_module._DirectFile, "write", slow_write)
    out = tmp_path / "shard"
    size, sha = publish(str(out), spill.ordered_pieces(blocks, 3000, 24, piece_bytes=1000, pool=pool),
                        parts_kept=True, release=pool.give, direct_io=True)
    assert out.read_bytes() == expected and size == len(expected)
    assert sha == hashlib.sha256(expected).hexdigest()
    assert len(made) == -(-3000 // (1000 // 24)) and len(pool._ours) <= 2 * (publish_module.WRITE_BEHIND + 1) + 1
    if writes:  # direct I/O where the disk has it: each part as it was when handed over
        assert b"".join(writes) == expected
    # Without release every piece is a buffer of its own.
    other = spill.PiecePool()
    list(spill.ordered_pieces(blocks, 3000, 24, piece_bytes=1000, pool=other))
    assert len(other._ours) == len(made)


def test_ordered_pieces_refuses_a_missing_or_repeated_place_and_other_sizes(tmp_path):
    from pipeline.io.spool import SpoolError

    blocks, _ = _spilled_shard(tmp_path)
    with pytest.raises(SpoolError, match="not each place once"):
        list(spill.ordered_pieces(blocks[:-1], 300, 24))
    repeated = [(np.where(p == 0, 1, p), r) for p, r in blocks]
    with pytest.raises(SpoolError, match="not each place once"):
        list(spill.ordered_pieces(repeated, 300, 24))
    # Records of another size than the usual one are copied one by one: the same bytes.
    assert b"".join(bytes(p) for p in spill.ordered_pieces(blocks, 300, 25)) == b"".join(
        bytes(p) for p in spill.ordered_pieces(blocks, 300, 24))
    os.truncate(blocks[0][1].path, 10)
    with pytest.raises(OSError, match="shorter"):
        list(spill.ordered_pieces(blocks, 300, 24))


def test_likely_cached_only_for_a_local_disk_with_the_spill_small_beside_free_memory(tmp_path, monkeypatch):
    (tmp_path / "a.records").write_bytes(b"x" * 1000)
    monkeypatch.setattr(localfs, "filesystem_type", lambda path: "ext4")
    monkeypatch.setattr(spill, "_available_memory", lambda: 4000)
    assert spill.likely_cached(str(tmp_path))
    monkeypatch.setattr(spill, "_available_memory", lambda: 3999)
    assert not spill.likely_cached(str(tmp_path))
    monkeypatch.setattr(spill, "_available_memory", lambda: 1 << 40)
    for network in ("nfs4", "fuse.s3fs", "cifs", None):
        monkeypatch.setattr(localfs, "filesystem_type", lambda path, kind=network: kind)
        assert not spill.likely_cached(str(tmp_path))
    assert not spill.likely_cached(str(tmp_path / "missing"))


def test_filesystem_of_a_path_is_its_longest_mount_point():
    kind = localfs.filesystem_type("/proc/self")
    assert kind == "proc" or not os.path.exists("/proc/self/mounts")


@pytest.mark.slow
def test_the_shards_are_the_same_bytes_gathered_from_the_spill_or_through_the_spool(tmp_path, tiny_model,
                                                                                     monkeypatch):
    used = []
    real = spill.ordered_pieces
    monkeypatch.setattr(spill, "ordered_pieces", lambda *a, **k: used.append(1) or real(*a, **k))
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"),
                       [pile_line(f"document {i} " * (10 + i % 30)) for i in range(200)])
    shas = {}
    for cached in (True, False):
        used.clear()
        monkeypatch.setattr(spill, "likely_cached", lambda spill_dir, cached=cached: cached)
        manifest = run.main(["--input", path, "--output_dir", str(tmp_path / f"out-{cached}"), "--tokenizer_model",
                             tiny_model, "--seq_len", "32", "--shard_size_mb", "0.05", *FAST_BEAM])
        assert manifest["totals"]["records"] > 0 and len(manifest["shards"]) > 1
        assert len(used) == (len(manifest["shards"]) if cached else 0)  # the padded last record too
        shas[cached] = [s["sha256"] for s in manifest["shards"]]
    assert shas[True] == shas[False]
