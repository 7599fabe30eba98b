"""s3:// inputs and outputs against a real S3-compatible server (moto's server mode) on loopback.

The server listens on 127.0.0.1 on a free port. The pipeline finds it the way a user points it at
MinIO or any S3-compatible store: `AWS_ENDPOINT_URL_S3` (botocore's standard variable), with the
credentials in `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`. There is no test-only hook in the
code. The secret key is a sentinel, and every log line, output object, dead letter and error
message is searched for it.
"""

import hashlib
import json
import os
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import fsspec
import pytest
from corpus_helpers import pile_line, run_free, write_lines
from s3_server import loopback_s3
from sample_corpus import write_sample_corpus

from pipeline.cli import run
from pipeline.format import manifest as manifest_lib
from pipeline.io import outputs

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SECRET = f"sentinel-secret-{uuid.uuid4().hex}"
BUCKET = "pile-bucket"
FLAGS = ["--seq_len", "128", "--chunk_mb", "0.05", "--shard_size_mb", "0.1"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A loopback S3 server with the Pile's layout in s3://pile-bucket/pile/; yields (fs, env, local copy)."""
    with loopback_s3(BUCKET, SECRET) as (fs, env):
        local = tmp_path_factory.mktemp("pile")
        write_sample_corpus(str(local), train_files=3, docs_per_file=30)
        # A fourth train file with malformed lines between good ones: dead letters on S3.
        good = [pile_line(f"document {i} " * 40, "Wikipedia (en)") for i in range(30)]
        bad = [b"{not json", pile_line("x", "No Such Subset"), b'{"text": 5, "meta": {}}']
        write_lines(str(local / "train" / "03.jsonl.zst"), good[:10] + bad + good[10:])
        fs.put(str(local) + "/", f"{BUCKET}/pile/", recursive=True)
        yield fs, env, local


def _pipeline(env, *argv):
    """`python -m pipeline.run ARGV` in a subprocess (its DirectRunner workers are processes too)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | env
    return subprocess.run([sys.executable, "-m", "pipeline.run", *argv], env=full_env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def _objects(fs, prefix):
    fs.invalidate_cache()
    return {p: fs.cat_file(p) for p in fs.find(prefix)}


@pytest.fixture(scope="module")
def s3_run(s3, tiny_model):
    """One job from s3:// to s3://, the tokenizer read from S3 too, two worker processes."""
    fs, env, local = s3
    fs.put_file(tiny_model, f"{BUCKET}/tokenizers/tiny.model")
    out = f"s3://{BUCKET}/tokens/train"
    proc = _pipeline(env, "--input", f"s3://{BUCKET}/pile/train/*.jsonl.zst", "--output_dir", out,
                     "--tokenizer_model", f"s3://{BUCKET}/tokenizers/tiny.model", *FLAGS,
                     "--runner", "DirectRunner", "--direct_running_mode", "multi_processing",
                     "--direct_num_workers", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_s3_job_writes_shards_dead_letters_and_the_manifest(s3, s3_run):
    fs, _, _ = s3
    out, _ = s3_run
    manifest = manifest_lib.load_manifest(out)
    assert [i["path"] for i in manifest["inputs"]] == [f"s3://{BUCKET}/pile/train/{n:02d}.jsonl.zst"
                                                       for n in range(4)]
    objects = _objects(fs, f"{BUCKET}/tokens/train")
    names = {k.rsplit("tokens/train/", 1)[1] for k in objects}
    assert len(manifest["shards"]) > 2
    for shard in manifest["shards"]:
        data = objects[f"{BUCKET}/tokens/train/{shard['path']}"]
        assert len(data) == shard["bytes"] and hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert manifest["dead_letters"]["records"] == 3
    (dead,) = manifest["dead_letters"]["files"]
    assert dead["path"] in names
    assert names == {"manifest.json", "dataset_info.json", "features.json", dead["path"]} | {
        s["path"] for s in manifest["shards"]}  # no temp objects; TFDS's metadata beside the manifest


def test_s3_output_is_byte_identical_to_a_local_run(s3, s3_run, tiny_model, tmp_path):
    _, _, local = s3
    out, _ = s3_run
    remote = manifest_lib.load_manifest(out)
    here = run.main(["--input", str(local / "train" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "out"),
                     "--tokenizer_model", tiny_model, *FLAGS, "--direct_running_mode", "in_memory",
                     "--direct_num_workers", "1"])
    assert run_free(remote["shards"]) == run_free(here["shards"])  # each run writes into a directory of its own
    for key in ("totals", "subsets", "packing", "shuffle", "tokenizer"):
        assert remote[key] == here[key], key


def test_s3_shards_parse_as_tfrecords_through_fsspec(s3_run):
    """Independent of the project's reader: every record's framing, CRCs and Example parse."""
    import tensorflow as tf
    from apache_beam.io.tfrecordio import _TFRecordUtil

    out, _ = s3_run
    manifest = manifest_lib.load_manifest(out)
    width = 2 if manifest["features"]["tokens"]["dtype"] == "uint16" else 4
    total = 0
    for shard in manifest["shards"]:
        with fsspec.open(manifest_lib.shard_url(manifest_lib.manifest_path(out), shard), "rb") as f:
            data = f.read()
        pos = count = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == _TFRecordUtil._masked_crc32c(data[pos:pos + 8])
            record = data[pos + 12:pos + 12 + length]
            crc = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0]
            assert crc == _TFRecordUtil._masked_crc32c(record)
            example = tf.train.Example.FromString(record)
            assert len(example.features.feature["tokens"].bytes_list.value[0]) == (128 + 1) * width
            pos += 16 + length
            count += 1
        assert pos == len(data) and count == shard["records"]
        total += count
    assert total == manifest["totals"]["records"]


def test_reader_reads_the_s3_shards(s3_run):
    from pipeline import tfdata

    out, _ = s3_run
    manifest = manifest_lib.load_manifest(out)
    steps = tfdata.steps_per_epoch(manifest, batch_size=4, dp_size=1)
    batches = list(tfdata.make_dataset(out, batch_size=4, shuffle=False, verify=True).as_numpy_iterator())
    assert len(batches) == steps == manifest["totals"]["records"] // 4
    assert batches[0]["inputs"].shape == (4, 128)


def test_s3_rerun_refuses_then_overwrites_with_the_same_bytes(s3, s3_run, tiny_model):
    fs, _, _ = s3
    out, _ = s3_run
    before = _objects(fs, f"{BUCKET}/tokens/train")
    argv = ["--input", f"s3://{BUCKET}/pile/train/*.jsonl.zst", "--output_dir", out,
            "--tokenizer_model", f"s3://{BUCKET}/tokenizers/tiny.model", *FLAGS,
            "--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
    with pytest.raises(FileExistsError, match="--overwrite"):
        run.main(argv)
    fs.pipe_file(f"{BUCKET}/tokens/other/notes.txt", b"not ours")
    with pytest.raises(FileExistsError, match="notes.txt"):
        outputs.prepare_output_dir(f"s3://{BUCKET}/tokens/other", overwrite=True)
    manifest = run.main(argv + ["--overwrite", "true"])
    # The same bytes, in the new run's directory (pipeline/io/outputs.py).
    def run_free_bytes(key, data):  # TFDS's dataset_info.json names the run directory
        return run_free(data.decode()).encode() if key.endswith("/dataset_info.json") else data

    after = {run_free(k): run_free_bytes(k, v) for k, v in _objects(fs, f"{BUCKET}/tokens/train").items()}
    before = {run_free(k): run_free_bytes(k, v) for k, v in before.items()}
    assert set(after) == set(before)
    manifest_key = f"{BUCKET}/tokens/train/manifest.json"
    info_key = f"{BUCKET}/tokens/train/dataset_info.json"  # TFDS's shard template names the run's directory
    assert {k: v for k, v in after.items() if k not in (manifest_key, info_key)} == {
        k: v for k, v in before.items() if k not in (manifest_key, info_key)}
    assert run_free(json.loads(after[info_key])) == run_free(json.loads(before[info_key]))

    def comparable(data):  # the manifest may record --overwrite in its config
        m = run_free(json.loads(data))
        m["config"].pop("overwrite", None)
        return m

    assert comparable(after[manifest_key]) == comparable(before[manifest_key])
    assert manifest == json.loads(after[manifest_key])


def test_no_secret_in_logs_outputs_dead_letters_or_errors(s3, s3_run, caplog):
    fs, env, _ = s3
    _, proc = s3_run
    assert "Found credentials in environment variables" in proc.stderr  # the secret was in use
    leaks = {"stdout": proc.stdout, "stderr": proc.stderr}

    # A corrupt input file fails the job inside a worker process: the whole error path, logged.
    fs.pipe_file(f"{BUCKET}/broken/00.jsonl.zst", b"\x28\xb5\x2f\xfd this is not a zstd frame")
    proc = _pipeline(env, "--input", f"s3://{BUCKET}/broken/*.jsonl.zst", "--output_dir", f"s3://{BUCKET}/failed",
                     "--tokenizer_model", f"s3://{BUCKET}/tokenizers/tiny.model", *FLAGS,
                     "--direct_running_mode", "in_memory", "--direct_num_workers", "1")
    assert proc.returncode != 0 and "not valid zstd data" in proc.stderr, proc.stderr[-2000:]
    leaks["corrupt.stdout"], leaks["corrupt.stderr"] = proc.stdout, proc.stderr

    # Errors raised before the job starts: a pattern matching nothing, credentials in a URL.
    bad = {
        "No input files match": [f"s3://{BUCKET}/nothing/*.jsonl.zst", f"s3://{BUCKET}/tokens/new"],
        "credentials in URLs are refused": [
            f"s3://AKIDPIPELINETEST:{SECRET}@{BUCKET}/pile/train/*.jsonl.zst", f"s3://{BUCKET}/tokens/new"],
        "credentials in URLs are refused ": [
            f"s3://{BUCKET}/pile/train/*.jsonl.zst", f"s3://key:{SECRET}@{BUCKET}/tokens/new"],
    }
    for message, (pattern, out) in bad.items():
        with pytest.raises((ValueError, FileNotFoundError), match=message.strip()) as caught:
            run.main(["--input", pattern, "--output_dir", out,
                      "--tokenizer_model", f"s3://{BUCKET}/tokenizers/tiny.model", *FLAGS])
        leaks[f"error: {message}"] = f"{caught.value} {caught.value!r}"
    leaks["log records"] = caplog.text

    for key, data in _objects(fs, BUCKET).items():
        leaks[key] = data.decode("latin-1")
    found = [name for name, text in leaks.items() if SECRET in text]
    assert not found, f"the secret leaked into {found}"
    assert len(leaks) > 12
