import hashlib
import json
import os
import threading

import pytest

from pipeline.config.job import PipelineConfig
from pipeline.format.framing import FramedRecords
from pipeline.io import outputs
from pipeline.io.publish import publish


def test_shard_is_published_complete_and_framed_as_tfrecord(tmp_path):
    import tensorflow as tf

    records = [f"record {i}".encode() * 10 for i in range(100)]
    block = FramedRecords.of(records)
    path = tmp_path / "train-00000-of-00001.tfrecord"
    size, sha = publish(str(path), block.parts())
    assert size == os.path.getsize(path)
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == records
    assert os.listdir(tmp_path) == ["train-00000-of-00001.tfrecord"]


def test_a_retried_or_duplicated_write_gives_the_same_bytes(tmp_path):
    # Dataflow may run the same bundle twice, even at the same time: both attempts must be harmless.
    records = [os.urandom(1000) for _ in range(300)]
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        publish(str(tmp_path / "s.tfrecord"), FramedRecords.of(records).parts()))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({sha for _, sha in results}) == 1
    assert hashlib.sha256((tmp_path / "s.tfrecord").read_bytes()).hexdigest() == results[0][1]
    assert os.listdir(tmp_path) == ["s.tfrecord"]  # no temp leftovers


def test_overwrite_removes_what_the_manifest_lists_and_our_temporary_files(tmp_path):
    # What --overwrite may remove, and what it refuses, is tested in tests/faults/test_overwrite.py.
    run = "0123456789abcdef"
    listed = [f"run-{run}/train-00000-of-00002.tfrecord", f"run-{run}/train-00001-of-00002.tfrecord",
              f"run-{run}/dead_letters/train-00000-00000.jsonl"]
    for name in [*listed, f"run-{run}/.train-00000-of-00002.tfrecord.tmp-" + "a" * 32]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "pile-token-shards", "run_id": run, "shards": [{"path": p} for p in listed[:2]],
        "dead_letters": {"files": [{"path": listed[2]}]}}))
    with pytest.raises(FileExistsError, match="finished output"):
        outputs.prepare_output_dir(str(tmp_path), overwrite=False)
    outputs.prepare_output_dir(str(tmp_path), overwrite=True)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("split", ["../evil", "a/b", "", "train.tfrecord"])
def test_split_names_cannot_escape_the_output_directory(split):
    with pytest.raises(ValueError, match="--split"):
        PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", split=split)


def test_dead_letter_lines_are_sorted_and_deterministic():
    recs = [{"file_index": 1, "line": 5}, {"file_index": 0, "line": 9}, {"file_index": 1, "line": 2}]
    lines = outputs.dead_letter_lines(recs)
    assert lines == outputs.dead_letter_lines(list(reversed(recs)))
    assert lines[0].startswith(b'{"file_index": 0')


def _pieces(n=40, size=1 << 16):
    for i in range(n):
        yield memoryview(bytes([i % 251]) * size + os.urandom(17))  # a buffer of its own each time


def test_kept_parts_are_written_behind_with_the_same_bytes_and_sha(tmp_path):
    parts = list(_pieces())
    plain = publish(str(tmp_path / "plain.bin"), parts)
    behind = publish(str(tmp_path / "behind.bin"), iter(parts), parts_kept=True)
    data = (tmp_path / "behind.bin").read_bytes()
    assert behind == plain == (len(data), hashlib.sha256(data).hexdigest())
    assert data == (tmp_path / "plain.bin").read_bytes() == b"".join(parts)
    assert not [t for t in threading.enumerate() if t.name == "publish-write-behind"]


def _direct_flag(fd):
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def test_kept_parts_go_to_a_local_disk_by_direct_io_with_the_same_bytes(tmp_path, monkeypatch):
    from pipeline.io import localfs

    opened = []

    def open_direct(path, real=localfs.open_direct):
        fd = real(path)
        opened.append(fd is not None and _direct_flag(fd))
        return fd

    monkeypatch.setattr(localfs, "open_direct", open_direct)
    parts = list(_pieces(37, 3 << 20))  # 37 x (3 MiB + 17): stage-sized writes, then a padded last block
    publish(str(tmp_path / "cached.bin"), iter(parts), parts_kept=True)
    assert opened == []  # direct I/O is the caller's choice (DirectRunner's spill sink makes it)
    size, sha = publish(str(tmp_path / "direct.bin"), iter(parts), parts_kept=True, direct_io=True)
    data = (tmp_path / "direct.bin").read_bytes()
    assert data == b"".join(parts) and (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "cached.bin").read_bytes() == data
    if not opened[0]:
        pytest.skip(f"no direct I/O under {tmp_path} (tmpfs?): the page cache's path was taken")


def test_a_direct_write_the_disk_refuses_goes_on_through_the_page_cache(tmp_path, monkeypatch):
    import errno

    from pipeline.io import localfs

    real_write, refused = os.write, []

    def write(fd, data):
        if _direct_flag(fd):
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(localfs, "open_direct", lambda path: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    monkeypatch.setattr(os, "write", write)
    from pipeline.io import publish as publish_module

    monkeypatch.setattr(publish_module, "_DirectFile", _forced_direct(publish_module._DirectFile))
    parts = list(_pieces(10, 1 << 20))
    size, sha = publish(str(tmp_path / "refused.bin"), iter(parts), parts_kept=True, direct_io=True)
    data = (tmp_path / "refused.bin").read_bytes()
    assert refused and data == b"".join(parts) and (size, sha) == (len(data), hashlib.sha256(data).hexdigest())


def _forced_direct(direct_file):
    """_DirectFile over a file opened without O_DIRECT, the flag set afterwards (any filesystem takes it to fcntl)."""
    import fcntl

    class Forced(direct_file):
        def __init__(self, fd):
            try:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
            except OSError:
                os.close(fd)
                pytest.skip("this filesystem takes no O_DIRECT at all")
            super().__init__(fd)

    return Forced


def test_a_failure_while_making_kept_parts_publishes_nothing(tmp_path):
    def failing():
        yield from _pieces(5)
        raise RuntimeError("a shard's record is missing")

    with pytest.raises(RuntimeError, match="missing"):
        publish(str(tmp_path / "shard.bin"), failing(), parts_kept=True)
    assert os.listdir(tmp_path) == []  # neither the file nor its temporary name


def test_a_failed_write_behind_is_the_writers_one_line(tmp_path):
    from pipeline.io.publish import OutputWriteError, _write_local

    made = []

    def counted():
        for part in _pieces(200):
            made.append(len(part))
            yield part

    with pytest.raises(OutputWriteError, match="disk is full"):
        _write_local("/dev/full", counted(), shown="out/shard.bin", sync=False, parts_kept=True)
    assert len(made) < 200  # the gathering stopped at the failure
