"""`--output_format megatron` end to end: the files read back with plain numpy against SentencePiece on the input.

Megatron's own reader is run on these files in tests/test_megatron_compat.py; here: the documents
and their order, bounded shards, the same bytes on every runner and worker count, per-subset
outputs and the data-path line, epochs, BOS/EOS, dead letters, fast backends, S3, Dataflow's dry
run, a killed job and its rerun.
"""

import gzip
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import zstandard
from corpus_helpers import FAST_BEAM, odd_corpus, output_digests, run_free
from s3_server import loopback_s3

from pipeline.cli import data_path as data_path_cli
from pipeline.cli import run
from pipeline.core.options import UsageError
from pipeline.format import manifest as manifest_lib
from pipeline.format import megatron as fmt
from pipeline.io.lock import LOCK_NAME

REPO = Path(__file__).resolve().parents[1]
SHARD_MB = 0.05
BASE = ["--output_format", "megatron", "--shard_size_mb", str(SHARD_MB), "--chunk_mb", "0.05"]
TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """3 train files in the Pile's layout (one with a ~1.2 MB document: longer than a shard) + one odd file."""
    return odd_corpus(tmp_path_factory.mktemp("pile"))


def _train(corpus) -> str:
    return str(corpus / "train" / "*.jsonl.zst")


def _run(corpus, out, model, *extra, beam_args=FAST_BEAM):
    return run.main(["--input", _train(corpus), "--output_dir", str(out), "--tokenizer_model", model, *BASE,
                     *extra, *beam_args])


def read_output(out: Path) -> dict:
    """{subset or None: [document tokens]} in shard order, from the files alone (plain numpy)."""
    manifest = fmt.load_manifest(str(out))
    groups: dict = {}
    for shard in manifest["shards"]:
        index = fmt.read_index((out / shard["idx"]["path"]).read_bytes())
        data = np.frombuffer((out / shard["bin"]["path"]).read_bytes(), index.dtype)
        assert len(data) * index.dtype.itemsize == index.bin_bytes == shard["bin"]["bytes"]
        for pointer, length in zip(index.pointers.tolist(), index.lengths.tolist(), strict=True):
            start = pointer // index.dtype.itemsize
            groups.setdefault(shard["subset"], []).append(data[start : start + length].astype(np.int64))
    return groups


def input_documents(corpus) -> list[tuple[str, str]]:
    """(subset, text) of every valid, non-empty line, in input order: json and zstandard only."""
    docs = []
    for path in sorted((corpus / "train").glob("*.jsonl.zst")):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        for line in io.BytesIO(data):
            try:
                obj = json.loads(line)
                text, subset = obj["text"], obj["meta"]["pile_set_name"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(text, str) and text.strip() and subset != "CommonCrawl":
                docs.append((subset, text))
    return docs


def expected(corpus, model, *, bos=False, subsets=None, per_subset=False) -> dict:
    sp = spm.SentencePieceProcessor(model_file=model)
    groups: dict = {}
    for subset, text in input_documents(corpus):
        if subsets is None or subset in subsets:
            doc = [sp.bos_id()] * bos + sp.encode(text) + [sp.eos_id()]
            groups.setdefault(subset if per_subset else None, []).append(np.array(doc))
    return groups


def assert_same_documents(got: dict, want: dict) -> None:
    assert sorted(got, key=str) == sorted(want, key=str)
    for group in want:
        assert len(got[group]) == len(want[group]), group
        for i, (a, b) in enumerate(zip(got[group], want[group], strict=True)):
            assert np.array_equal(a, b), f"{group} document {i}"


@pytest.fixture(scope="module")
def plain(corpus, tiny_model, tmp_path_factory):
    """(output dir, manifest) of a DirectRunner run in one process."""
    out = tmp_path_factory.mktemp("plain") / "out"
    return out, _run(corpus, out, tiny_model)


@pytest.mark.slow
def test_documents_equal_sentencepiece_in_input_order(corpus, tiny_model, plain):
    out, manifest = plain
    assert_same_documents(read_output(out), expected(corpus, tiny_model))
    totals = manifest["totals"]
    assert totals["documents"] == totals["documents_kept"] == 3 * 40 + 1 + 2  # + the long document + 2 odd ones
    assert totals["tokens"] == sum(len(d) for d in expected(corpus, tiny_model)[None])
    assert manifest["megatron"]["dtype"] == "uint16" and manifest["megatron"]["dtype_code"] == 8
    assert manifest["subsets"]["ArXiv"]["filtered"] == {"empty_text": 1}
    assert "seq_len" not in manifest["config"] and manifest["config"]["output_format"] == "megatron"


@pytest.mark.slow
def test_every_file_is_listed_complete_and_shards_are_bounded(plain):
    out, manifest = plain
    listed = {"manifest.json"} | {d["path"] for d in manifest["dead_letters"]["files"]}
    max_doc = 0
    for shard in manifest["shards"]:
        for part in ("bin", "idx"):
            data = (out / shard[part]["path"]).read_bytes()
            assert len(data) == shard[part]["bytes"] and hashlib.sha256(data).hexdigest() == shard[part]["sha256"]
            listed.add(shard[part]["path"])
        lengths = fmt.read_index((out / shard["idx"]["path"]).read_bytes()).lengths
        assert len(lengths) == shard["documents"] and lengths.sum() == shard["tokens"]
        max_doc = max(max_doc, int(lengths.max()) * 2)
        assert shard["bin"]["bytes"] + shard["idx"]["bytes"] <= SHARD_MB * (1 << 20) + max_doc + 20
    assert set(output_digests(out)) == {run_free(path) for path in listed}
    # One document is longer than a shard: the shards around it are still numbered 0..n-1.
    count = len(manifest["shards"])
    assert count > 3 and max_doc > SHARD_MB * (1 << 20)
    assert [s["path"] for s in manifest["shards"]] == [f"run-{manifest['run_id']}/train-{i:05d}-of-{count:05d}"
                                                       for i in range(count)]
    assert manifest["megatron"]["data_path"] == " ".join(f"{s['tokens']} {s['path']}" for s in manifest["shards"])


@pytest.mark.slow
def test_same_bytes_on_two_worker_processes(corpus, tiny_model, plain, tmp_path):
    out, _ = plain
    two = tmp_path / "two"
    _run(corpus, two, tiny_model, beam_args=["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"])
    assert output_digests(two) == output_digests(out)
    assert not [p for p in two.iterdir() if TEMP.match(p.name)]  # the spill directory is gone


@pytest.mark.slow
def test_portable_runner_writes_the_same_bytes(corpus, tiny_model, plain, tmp_path):
    out, _ = plain
    portable = tmp_path / "portable"
    _run(corpus, portable, tiny_model, beam_args=["--runner", "PortableRunner", "--job_endpoint", "embed",
                                                   "--environment_type", "LOOPBACK"])
    assert output_digests(portable) == output_digests(out)


@pytest.mark.slow
def test_document_order_and_shards_do_not_depend_on_chunking(corpus, tiny_model, plain, tmp_path):
    _, manifest = plain
    other = _run(corpus, tmp_path / "chunks", tiny_model, "--chunk_mb", "0.3")
    assert run_free(other["shards"]) == run_free(manifest["shards"])


@pytest.mark.slow
def test_per_subset_selection_bos_and_epochs(corpus, tiny_model, tmp_path):
    chosen = ["ArXiv", "Books3", "Github", "Wikipedia (en)"]
    out = tmp_path / "out"
    manifest = _run(corpus, out, tiny_model, "--per_subset", "--subsets", ",".join(chosen), "--add_bos",
                    "--epochs", "Wikipedia (en)=2,Books3=1.5,Github=0", "--seed", "3")
    got = read_output(out)
    want = expected(corpus, tiny_model, bos=True, subsets=chosen, per_subset=True)
    assert set(got) == {"ArXiv", "Books3", "Wikipedia (en)"}  # Github: 0 epochs, nothing written
    for subset, docs in got.items():
        epochs = {"Wikipedia (en)": 2, "Books3": 1.5}.get(subset, 1)
        first = want[subset]
        # Copy 0 is every document in input order; the copies that follow repeat them in the same order.
        assert_same_documents({subset: docs[: len(first)]}, {subset: first})
        repeats = docs[len(first):]
        if epochs == 2:
            assert_same_documents({subset: repeats}, {subset: first})
        elif epochs == 1.5:
            assert 0 < len(repeats) < len(first)
            positions = [next(i for i, d in enumerate(first) if np.array_equal(d, r)) for r in repeats]
            assert positions == sorted(positions)
        else:
            assert not repeats
        assert all(d[0] == 1 and d[-1] == 2 for d in docs)  # BOS ... EOS
        stats = manifest["subsets"][subset]
        assert stats["tokens_with_epochs"] == sum(len(d) for d in docs)
        assert {run_free(s["path"]).split("-")[1] for s in manifest["shards"] if s["subset"] == subset} == {
            fmt.subset_slug(subset)}
    # The --data-path line: its token counts already hold the epochs; --epochs again is refused.
    # Its prefixes go through the `latest` link, which names this run's directory.
    line = data_path_cli.data_path_line(str(out))
    assert line.split()[1] == f"{out}/latest/{run_free(manifest['shards'][0]['path'])}"
    assert os.path.realpath(out / "latest") == os.path.realpath(out / manifest["shards"][0]["path"].split("/")[0])
    with pytest.raises(ValueError, match="already holds"):
        data_path_cli.data_path_line(str(out), "pile_paper")


@pytest.mark.slow
def test_data_path_command_weighs_subsets_by_paper_epochs(corpus, tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    manifest = _run(corpus, out, tiny_model, "--per_subset")
    capsys.readouterr()
    assert data_path_cli.cli([str(out), "--epochs", "pile_paper", "--style", "nemo"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("[") and printed.endswith("]")
    items = printed[1:-1].split(",")
    weights = dict(zip(items[1::2], map(float, items[0::2]), strict=True))
    for shard in manifest["shards"]:
        paper = {"Wikipedia (en)": 3.0, "Pile-CC": 1.0, "Gutenberg (PG-19)": 2.5}.get(shard["subset"])
        if paper:
            assert weights[f"{out}/latest/{run_free(shard['path'])}"] == shard["tokens"] * paper
    assert data_path_cli.cli([str(tmp_path / "missing")]) == 2
    with pytest.raises(ValueError, match="Wikipedia"):  # a misspelt name must not silently weigh 1
        data_path_cli.data_path_line(str(out), "Wikipedia=3")
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", "data-path", "--help"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0 and "usage: pile-pipeline data-path" in result.stdout


@pytest.mark.slow
def test_per_subset_with_any_subset_names(tiny_model, tmp_path):
    """Another corpus's layout and names (sample_data/notes): one group of shards per name, in input order."""
    notes = REPO / "sample_data" / "notes"
    out = tmp_path / "out"
    manifest = run.main(["--input", str(notes / "*"), "--output_dir", str(out), "--tokenizer_model", tiny_model,
                         "--output_format", "megatron", "--per_subset", "--text_key", "body", "--subset_key",
                         "source.name", "--subset_names", "any", "--default_subset", "misc", *FAST_BEAM])
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    want: dict = {}
    for path in sorted(notes.iterdir()):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in data.splitlines():
            obj = json.loads(line)
            if obj["body"].strip():
                subset = obj.get("source", {}).get("name") or "misc"
                want.setdefault(subset, []).append(np.array(sp.encode(obj["body"]) + [sp.eos_id()]))
    assert set(want) == {"forum", "manuals", "recipes", "Wikipedia (en)", "misc"}
    assert_same_documents(read_output(out), want)
    assert {run_free(s["path"]) for s in manifest["shards"]} == {
        "train-forum-00000-of-00001", "train-manuals-00000-of-00001", "train-recipes-00000-of-00001",
        "train-misc-00000-of-00001", "train-Wikipedia_en-00000-of-00001"}


@pytest.mark.slow
def test_dead_letters_are_the_tfrecord_jobs(corpus, tiny_model, plain, tmp_path):
    out, manifest = plain
    tf_out = tmp_path / "tfrecord"
    tf_manifest = run.main(["--input", _train(corpus), "--output_dir", str(tf_out), "--tokenizer_model", tiny_model,
                            "--chunk_mb", "0.05", *FAST_BEAM])
    assert run_free(manifest["dead_letters"]) == run_free(tf_manifest["dead_letters"])
    assert manifest["dead_letters"]["records"] == 3
    for entry, tf_entry in zip(manifest["dead_letters"]["files"], tf_manifest["dead_letters"]["files"], strict=True):
        assert (out / entry["path"]).read_bytes() == (tf_out / tf_entry["path"]).read_bytes()
    assert manifest["subsets"] == tf_manifest["subsets"]


@pytest.mark.slow
def test_fast_backend_writes_the_same_bytes(corpus, tiny_model, plain, tmp_path):
    out, _ = plain
    fast = _run(corpus, tmp_path / "fast", tiny_model, "--tokenizer_backend", "auto", "--verify_tokenizer", "fail")
    if os.environ.get("PILE_REQUIRE_FAST_BACKENDS"):
        assert fast["tokenizer"]["backend"]["name"] != "sentencepiece", fast["tokenizer"]["backend"]
    assert {k: v for k, v in output_digests(tmp_path / "fast").items() if k != "manifest.json"} == {
        k: v for k, v in output_digests(out).items() if k != "manifest.json"}


@pytest.mark.slow
def test_each_format_refuses_the_others_manifest(plain, tmp_path, corpus, tiny_model):
    from pipeline import tfdata

    out, _ = plain
    # The tf.data reader reads a Megatron output as a document store, packed at the seq_len it is given.
    with pytest.raises(ValueError, match="a document store is packed when read: pass seq_len"):
        tfdata.make_dataset(str(out), batch_size=2, seed=0)
    tf_manifest = run.main(["--input", str(corpus / "val.jsonl.zst"), "--output_dir", str(tmp_path / "tf"),
                            "--tokenizer_model", tiny_model, *FAST_BEAM])
    assert tf_manifest["format"] == manifest_lib.FORMAT
    with pytest.raises(manifest_lib.ManifestError, match="pile-token-shards"):
        fmt.load_manifest(str(tmp_path / "tf"))


@pytest.mark.parametrize("flags", [["--output_format", "megatron", "--document_boundaries"],
                                   ["--output_format", "parquet"]])
def test_options_that_do_not_fit_are_refused(flags, tiny_model):
    with pytest.raises(UsageError):
        run.parse_args(["--input", "x", "--output_dir", "y", "--tokenizer_model", tiny_model, *flags])


@pytest.mark.slow
def test_dataflow_dry_run_translates_the_megatron_job(corpus, tiny_model, monkeypatch):
    """Translated for Dataflow offline, as tests/test_runners.py does for the TFRecord job."""
    import socket

    import apache_beam as beam

    from pipeline.beam.job import build_pipeline
    from pipeline.beam.options import pipeline_options
    from pipeline.beam.preflight import prepare

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    argv = ["--input", _train(corpus), "--output_dir", "gs://my-bucket/pile/train", "--tokenizer_model", tiny_model,
            *BASE, "--per_subset", "--runner", "DataflowRunner", "--project", "my-project", "--region", "us-central1",
            "--temp_location", "gs://my-bucket/tmp", "--staging_location", "gs://my-bucket/staging",
            "--dry_run", "True", "--setup_file", str(REPO / "setup.py"), "--requirements_cache", "skip",
            "--no_save_main_session"]
    config, beam_args = run.parse_args(argv)
    options = pipeline_options(beam_args)
    p = beam.Pipeline(options=options)
    build_pipeline(p, prepare(config, options))
    result = p.run()
    result.wait_until_finish()
    # The job is one composite, TokenShards (pipeline/beam/transform.py): its stages one level down.
    names = [t.unique_name for t in result.job.proto_pipeline.components.transforms.values()]
    labels = {name.removeprefix("TokenShards/").split("/")[0] for name in names}
    assert "TokenShards" in names
    assert {"ReadChunks", "FanOut", "TokenizeDocuments", "PlanLayout", "AssignShards", "GroupByShard",
            "WriteShards", "NameShards", "WriteDeadLetters", "WriteManifest"} <= labels
    assert "TokenizeAndPack" not in labels


def test_a_retried_shard_write_gives_the_same_files(tmp_path, tiny_model):
    """Dataflow may run a DoFn twice on the same element: both attempts publish the same bytes."""
    from pipeline.beam import megatron as beam_megatron

    config, _ = run.parse_args(["--input", "x", "--output_dir", str(tmp_path), "--tokenizer_model", tiny_model,
                                "--output_format", "megatron"])
    from pipeline.format.framing import FramedRecords

    docs = [np.array([5, 6, 2], "<u2"), np.array([7, 2], "<u2")]
    block = FramedRecords(b"".join(d.tobytes() for d in docs), np.cumsum([d.nbytes for d in docs]))
    fn = beam_megatron.WriteShardFn(config, np.dtype("<u2"), "0123456789abcdef")
    names = {("", 0): "train-00000-of-00001"}
    element = (("", 0), [(1, FramedRecords(block.data[6:], np.array([4]))), (0, block)])  # document 1 twice
    with pytest.raises(RuntimeError, match="missing or repeated"):
        list(fn.process(element, names))
    element = (("", 0), [(0, block)])
    first = list(fn.process(element, names))
    again = list(fn.process(element, names))
    run_dir = tmp_path / "run-0123456789abcdef"
    assert first == again and sorted(os.listdir(run_dir)) == ["train-00000-of-00001.bin", "train-00000-of-00001.idx"]
    assert (run_dir / "train-00000-of-00001.bin").read_bytes() == block.data
    assert fmt.read_index((run_dir / "train-00000-of-00001.idx").read_bytes()).lengths.tolist() == [3, 2]


@pytest.mark.slow
def test_sigkill_midway_then_overwrite_gives_the_clean_output(corpus, tiny_model, plain, tmp_path):
    clean, _ = plain
    clean_files = {run_free(str(p.relative_to(clean))): p.read_bytes() for p in clean.rglob("*") if p.is_file()}
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--input", _train(corpus), "--output_dir", str(out), "--tokenizer_model", tiny_model, *BASE]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *argv, "--direct_running_mode",
                             "multi_processing", "--direct_num_workers", "2"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            seen = [str(p) for p in out.rglob("*")]
            if any(".bin" in name for name in seen):
                break
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert seen, "the job was killed before it wrote anything: nothing was tested"
    killed = {run_free(str(p.relative_to(out))): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert "manifest.json" not in killed, "the job finished before the kill: nothing was tested"
    with pytest.raises(manifest_lib.ManifestError, match="No manifest"):
        fmt.load_manifest(str(out))
    for name, data in killed.items():  # under a final name only complete files (the dead run's lock, its work items)
        assert clean_files.get(name) == data or any(TEMP.match(part) for part in name.split("/")) or \
            name == LOCK_NAME or name.startswith(".resume/"), name
    with pytest.raises(FileExistsError, match="did not finish"):
        run.main(argv + FAST_BEAM)
    run.main(argv + FAST_BEAM + ["--overwrite"])
    assert output_digests(out) == output_digests(clean)


@pytest.fixture
def s3_env():
    """A loopback S3 server (tests/s3_server.py) with an empty bucket."""
    with loopback_s3("bucket") as server:
        yield server


@pytest.mark.slow
def test_s3_output_is_byte_identical_to_a_local_run(corpus, tiny_model, s3_env, tmp_path):
    fs, _ = s3_env
    fs.put(str(corpus / "train") + "/", "bucket/pile/train/", recursive=True)
    out = "s3://bucket/megatron"
    remote = run.main(["--input", "s3://bucket/pile/train/*.jsonl.zst", "--output_dir", out, "--tokenizer_model",
                       tiny_model, *BASE, "--per_subset", *FAST_BEAM])
    assert remote == fmt.load_manifest(out)
    fs.invalidate_cache()
    names = {p.rsplit("megatron/", 1)[1] for p in fs.find("bucket/megatron")}
    assert names == {"manifest.json"} | {s[p]["path"] for s in remote["shards"] for p in ("bin", "idx")} | {
        d["path"] for d in remote["dead_letters"]["files"]}
    for shard in remote["shards"]:
        assert hashlib.sha256(fs.cat_file(f"bucket/megatron/{shard['bin']['path']}")).hexdigest() == \
            shard["bin"]["sha256"]
    assert f"{out}/{remote['shards'][0]['path']}" in data_path_cli.data_path_line(out)
    # The same job on local files: the same shards.
    local = run.main(["--input", _train(corpus), "--output_dir", str(tmp_path / "local"), "--tokenizer_model",
                      tiny_model, *BASE, "--per_subset", *FAST_BEAM])
    assert run_free(local["shards"]) == run_free(remote["shards"])
