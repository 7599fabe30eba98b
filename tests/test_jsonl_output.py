"""`--output_format jsonl` end to end: the cleaned text read back with `datasets` equals what the tokenizer sees.

The job writes the corpus without a tokenizer; its shards, read back with `datasets.load_dataset("json")`
and with plain zstandard, hold exactly the texts the engine's tokenizing path gives for the same config,
in input order; every file is listed with its size and sha256; the same bytes on two worker processes,
PortableRunner, other --chunk_mb, a tokenizer (which only counts) and a real Dask cluster; --overwrite;
the options that do not apply refused. The cleaning stages, hostile lines, datatrove and the inspection
commands: tests/test_jsonl_cleaning.py.
"""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import zstandard
from corpus_helpers import FAST_BEAM, odd_corpus, output_digests, run_free

from pipeline.cli import run
from pipeline.core.options import UsageError
from pipeline.format import jsonl as fmt
from pipeline.io.inputs import iter_chunks
from pipeline.process.documents import DocumentEngine, WorkItem
from pipeline.tokenize.model import BackendChoice, TokenizerModel

REPO = Path(__file__).resolve().parents[1]
SHARD_MB = 0.05
BASE = ["--output_format", "jsonl", "--shard_size_mb", str(SHARD_MB), "--chunk_mb", "0.05"]
TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """3 train files in the Pile's layout (one with a ~1.2 MB document: longer than a shard) + one odd file."""
    return odd_corpus(tmp_path_factory.mktemp("pile"),
                      "caf\u00e9 \u6570\u636e and a last good one \u2028 beside a line separator")


def _run(corpus, out, *extra, beam_args=FAST_BEAM):
    return run.main(["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(out), *BASE, *extra,
                     *beam_args])


@pytest.fixture(scope="module")
def plain(corpus, tmp_path_factory):
    """(output dir, manifest) of a DirectRunner run in one process, without a tokenizer."""
    out = tmp_path_factory.mktemp("plain") / "out"
    return out, _run(corpus, out)


def read_output(out: Path) -> list[dict]:
    """Every line of the output, in shard order, from the files alone (zstandard and json), each file checked."""
    docs = []
    for shard in fmt.load_manifest(str(out))["shards"]:
        data = (out / shard["path"]).read_bytes()
        assert len(data) == shard["bytes"] and hashlib.sha256(data).hexdigest() == shard["sha256"]
        params = zstandard.get_frame_parameters(data)
        assert params.content_size == shard["uncompressed_bytes"] and params.has_checksum
        text = zstandard.ZstdDecompressor().decompress(data)
        assert text.endswith(b"\n") and len(text) == shard["uncompressed_bytes"]
        lines = text[:-1].split(b"\n")
        assert len(lines) == shard["documents"]
        docs += [json.loads(line) for line in lines]
    return docs


def with_datasets(out: Path, tmp_path: Path):
    """The output as `datasets` reads it: load_dataset("json") over the files the manifest lists, in its order."""
    import datasets

    datasets.disable_progress_bars()
    files = fmt.data_files(fmt.load_manifest(str(out)), str(out))
    return datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(tmp_path / "hf-cache"))


def tokenizer_sees(manifest: dict, argv: list[str], model: str) -> list[tuple[str, str, str, int]]:
    """(text, subset, file, line) of every document the engine's tokenizing path tokenizes for the same flags."""
    config, _ = run.parse_args([*argv, "--output_format", "megatron", "--tokenizer_model", model])
    loaded = TokenizerModel.load(model)
    engine = DocumentEngine(config, loaded.spec(BackendChoice("sentencepiece", "", {}),
                                                loaded.special_ids(add_bos=False, add_eos=True)))
    engine.setup()
    seen = []
    for index, entry in enumerate(manifest["inputs"]):
        for chunk in iter_chunks(entry["path"], index, config.chunk_bytes, config.max_line_bytes):
            validated = engine.validate(WorkItem(chunk))
            assert validated.own_ids is None  # no --id_key
            seen += [(t, s, entry["path"], line.number)
                     for t, s, line in zip(validated.texts, validated.subsets, validated.lines, strict=True)]
    return seen


@pytest.mark.slow
def test_datasets_reads_back_the_texts_the_tokenizer_sees_in_input_order(corpus, plain, tiny_model, tmp_path):
    out, manifest = plain
    argv = ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "x"), "--chunk_mb", "0.3"]
    seen = tokenizer_sees(manifest, argv, tiny_model)
    ds = with_datasets(out, tmp_path)
    assert len(seen) == len(ds) == manifest["totals"]["documents"] == 3 * 40 + 1 + 2
    got = [(row["text"], row["metadata"]["subset"], row["metadata"]["source"]["file"],
            row["metadata"]["source"]["line"]) for row in ds]
    assert got == seen
    assert [d["metadata"] for d in read_output(out)] == [row["metadata"] for row in ds]
    assert set(ds.column_names) == {"text", "metadata"}  # no --id_key: no id
    assert "\u2028" in got[-1][0]  # a line separator inside a text stays inside its line
    assert manifest["subsets"]["ArXiv"]["filtered"] == {"empty_text": 1}
    assert manifest["dead_letters"]["records"] == 3


@pytest.mark.slow
def test_no_tokenizer_no_token_counts_and_the_manifest_s_keys(plain):
    _, manifest = plain
    assert "tokenizer" not in manifest and "tokens" not in manifest["totals"]
    assert all("tokens" not in s and "tokens_with_epochs" not in s for s in manifest["subsets"].values())
    assert set(manifest) == {"config", "created_by", "dead_letters", "format", "format_version", "inputs", "jsonl",
                             "resume", "run_id", "shards", "split", "subsets", "totals"}
    assert manifest["format"] == "pile-cleaned-text" and manifest["jsonl"]["compression"]["codec"] == "zstd"
    assert manifest["jsonl"]["tokenized"] is False and manifest["jsonl"]["keys"] == ["text", "metadata"]
    assert {"tokenizer_model", "add_eos", "seq_len", "seed", "epochs"}.isdisjoint(manifest["config"])
    assert manifest["config"]["output_format"] == "jsonl"
    totals = manifest["totals"]
    assert totals["documents"] == totals["documents_kept"] == sum(s["kept"] for s in manifest["subsets"].values())
    assert totals["lines"] == sum(s["documents"] for s in manifest["subsets"].values()) + 3  # + dead letters
    summary = fmt.format_summary(manifest, 2.0, "/data/out", "latest")
    table, rest = summary.split("\n\ncleaned text: ")
    assert "tokens" not in table.splitlines()[0] and f"{totals['documents']} documents" in rest
    assert "not tokenized" in rest and 'data_files="/data/out/latest/train-*.jsonl.zst"' in rest


@pytest.mark.slow
def test_every_file_is_listed_complete_and_shards_are_bounded(plain):
    out, manifest = plain
    listed = {"manifest.json"} | {d["path"] for d in manifest["dead_letters"]["files"]}
    longest = max(len(json.dumps(d, ensure_ascii=False).encode()) for d in read_output(out)) + 1
    for shard in manifest["shards"]:
        listed.add(shard["path"])
        assert shard["uncompressed_bytes"] <= SHARD_MB * (1 << 20) + longest
    assert set(output_digests(out)) == {run_free(path) for path in listed}
    count = len(manifest["shards"])
    assert count > 3 and longest > SHARD_MB * (1 << 20)  # a document longer than a shard: still 0..n-1
    assert [s["path"] for s in manifest["shards"]] == [
        f"run-{manifest['run_id']}/train-{i:05d}-of-{count:05d}.jsonl.zst" for i in range(count)]
    assert (out / "latest").resolve() == (out / f"run-{manifest['run_id']}").resolve()


@pytest.mark.slow
def test_same_bytes_on_two_worker_processes(corpus, plain, tmp_path):
    out, _ = plain
    two = tmp_path / "two"
    _run(corpus, two, beam_args=["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"])
    assert output_digests(two) == output_digests(out)
    assert not [p for p in two.iterdir() if TEMP.match(p.name)]


@pytest.mark.slow
def test_portable_runner_writes_the_same_bytes(corpus, plain, tmp_path):
    out, _ = plain
    portable = tmp_path / "portable"
    _run(corpus, portable, beam_args=["--runner", "PortableRunner", "--job_endpoint", "embed",
                                      "--environment_type", "LOOPBACK"])
    assert output_digests(portable) == output_digests(out)


@pytest.mark.slow
def test_other_chunk_sizes_write_the_same_shards(corpus, plain, tmp_path):
    _, manifest = plain
    other = _run(corpus, tmp_path / "chunks", "--chunk_mb", "0.3")
    assert run_free(other["shards"]) == run_free(manifest["shards"])


@pytest.mark.slow
def test_a_tokenizer_only_counts_tokens(corpus, plain, tiny_model, tmp_path):
    """With --tokenizer_model: the same shards, and each subset's tokens as the Megatron output counts them."""
    out, manifest = plain
    counted = _run(corpus, tmp_path / "counted", "--tokenizer_model", tiny_model, "--add_bos")
    assert run_free(counted["shards"]) == run_free(manifest["shards"])
    files = {k: v for k, v in output_digests(tmp_path / "counted").items() if k != "manifest.json"}
    assert files == {k: v for k, v in output_digests(out).items() if k != "manifest.json"}
    assert counted["tokenizer"]["sha256"] and counted["jsonl"]["tokenized"] is True
    assert counted["config"]["tokenizer_model"] == tiny_model and counted["config"]["add_bos"] is True
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    want: dict = {}
    for doc in read_output(out):
        subset = doc["metadata"]["subset"]
        want[subset] = want.get(subset, 0) + len(sp.encode(doc["text"])) + 2  # BOS ... EOS
    assert {name: s["tokens"] for name, s in counted["subsets"].items() if "tokens" in s} == want
    assert counted["totals"]["tokens"] == sum(want.values())
    assert "tokens" in fmt.format_summary(counted).splitlines()[0]
    megatron = run.main(["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "meg"),
                         "--output_format", "megatron", "--tokenizer_model", tiny_model, "--add_bos", *FAST_BEAM])
    assert {k: s.get("tokens") for k, s in megatron["subsets"].items()} == {
        k: s.get("tokens") for k, s in counted["subsets"].items()}


@pytest.mark.slow
def test_the_output_is_an_input_of_the_job_again(plain, tmp_path):
    """Read back by the job itself (`--subset_key metadata.subset`): the same texts, subsets and order."""
    out, _ = plain
    run.main(["--input", str(out / "latest" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "again"),
              "--output_format", "jsonl", "--subset_key", "metadata.subset", *FAST_BEAM])
    first, second = read_output(out), read_output(tmp_path / "again")
    assert [(d["text"], d["metadata"]["subset"]) for d in second] == [
        (d["text"], d["metadata"]["subset"]) for d in first]


@pytest.mark.slow
def test_overwrite_replaces_a_jsonl_output_with_the_same_bytes(corpus, plain, tmp_path):
    out, _ = plain
    again = tmp_path / "again"
    _run(corpus, again)
    with pytest.raises(FileExistsError, match="not empty"):
        _run(corpus, again)
    _run(corpus, again, "--overwrite")
    assert output_digests(again) == output_digests(out)
    assert len([p for p in again.iterdir() if p.name.startswith("run-")]) == 1


@pytest.mark.slow
def test_dask_cluster_writes_the_same_bytes(corpus, plain, tmp_path):
    """A real dask.distributed cluster (tests/dask_cluster.py): workers unpickle the job, Dask's shuffle."""
    from dask_cluster import dask_cluster

    out, _ = plain
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        _run(corpus, tmp_path / "dask", beam_args=["--runner", "DaskRunner", "--dask_client_address",
                                                   cluster.address])
    assert output_digests(tmp_path / "dask") == output_digests(out)


@pytest.mark.parametrize("flags, named", [
    (["--seq_len", "512"], "--seq_len"), (["--packing", "best_fit"], "--packing"),
    (["--document_boundaries"], "--document_boundaries"), (["--epochs", "pile_paper"], "--epochs"),
    (["--per_subset"], "--per_subset"), (["--provenance"], "--provenance"),
    (["--add_bos"], "--add_bos without --tokenizer_model"),
    (["--tokenizer_backend", "auto"], "--tokenizer_backend without --tokenizer_model")])
def test_options_that_do_not_apply_are_refused_naming_the_flag(flags, named):
    with pytest.raises(UsageError, match=f"^{re.escape(named)}"):
        run.parse_args(["--input", "x", "--output_dir", "y", "--output_format", "jsonl", *flags])


def test_only_jsonl_runs_without_a_tokenizer():
    config, _ = run.parse_args(["--input", "x", "--output_dir", "y", "--output_format", "jsonl"])
    assert config.tokenizer_model is None and "tokenizer_model" not in config.to_json()
    for fmt_name in ("tfrecord", "megatron"):
        with pytest.raises(UsageError, match=f"--tokenizer_model is required for --output_format {fmt_name}"):
            run.parse_args(["--input", "x", "--output_dir", "y", "--output_format", fmt_name])


@pytest.mark.slow
def test_the_command_exits_2_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "pipeline.run", "--input", "sample_data/pile/val.jsonl.zst",
                             "--output_dir", str(out), "--output_format", "jsonl", "--epochs", "ArXiv=2"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert "--epochs does not apply to --output_format jsonl" in lines[0] and not out.exists()


@pytest.mark.slow
def test_token_shards_writes_cleaned_text_without_a_tokenizer(tmp_path):
    """The job as a PTransform over a PCollection of documents (pipeline/beam/transform.py), no tokenizer."""
    import apache_beam as beam

    from pipeline.beam.transform import TokenShards
    from pipeline.config.job import PipelineConfig

    config = PipelineConfig(inputs=("my-documents",), output_dir=str(tmp_path / "out"), output_format="jsonl")
    docs = [{"text": f"document {i}", "meta": {"pile_set_name": "Pile-CC"}} for i in range(6)]
    with beam.Pipeline() as p:
        _ = p | beam.Create(docs) | TokenShards(config)
    written = read_output(tmp_path / "out")
    assert sorted(d["text"] for d in written) == sorted(d["text"] for d in docs)
    assert {d["metadata"]["source"]["file"] for d in written} == {"my-documents"}


def test_overwrite_removes_what_an_unfinished_jsonl_run_left(tmp_path):
    """A killed run's shards (no manifest) are ours: --overwrite removes them rather than refusing a stranger's."""
    from pipeline.io.outputs import is_run_file, prepare_output_dir

    left = tmp_path / "run-0123456789abcdef" / "train-00000-of-00002.jsonl.zst"
    left.parent.mkdir()
    left.write_bytes(b"partial")
    assert is_run_file("run-0123456789abcdef/train-00000-of-00002.jsonl.zst")
    assert not is_run_file("run-0123456789abcdef/train-00000-of-00002.jsonl")
    prepare_output_dir(str(tmp_path), overwrite=True)
    assert not left.exists()


@pytest.mark.slow
def test_s3_output_holds_the_local_runs_documents(corpus, plain, tmp_path):
    """Read from and written to an object store (a loopback S3 server): one PUT a file, no `latest` link.

    The lines are the local run's but for their source, which names the input where it was read.
    """
    from s3_server import loopback_s3

    out, manifest = plain
    with loopback_s3("bucket") as (fs, _):
        fs.put(str(corpus / "train") + "/", "bucket/pile/train/", recursive=True)
        remote = run.main(["--input", "s3://bucket/pile/train/*.jsonl.zst", "--output_dir", "s3://bucket/clean",
                           *BASE, *FAST_BEAM])
        assert remote == fmt.load_manifest("s3://bucket/clean")
        fs.invalidate_cache()
        names = {p.rsplit("clean/", 1)[1] for p in fs.find("bucket/clean")}
        assert names == {"manifest.json"} | {s["path"] for s in remote["shards"]} | {
            d["path"] for d in remote["dead_letters"]["files"]}
        lines = [json.loads(line) for shard in remote["shards"] for line in zstandard.ZstdDecompressor().decompress(
            fs.cat_file(f"bucket/clean/{shard['path']}")).splitlines()]
    local = read_output(out)
    for doc in local:
        doc["metadata"]["source"]["file"] = "s3://bucket/pile/train/" + doc["metadata"]["source"]["file"].rsplit(
            "/", 1)[1]
    assert lines == local and remote["totals"]["documents"] == manifest["totals"]["documents"]


@pytest.mark.slow
def test_dataflow_dry_run_translates_the_jsonl_job(corpus, monkeypatch):
    """Translated for Dataflow offline, without a tokenizer, as tests/test_runners.py does for the TFRecord job."""
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
    config, beam_args = run.parse_args([
        "--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", "gs://my-bucket/pile/clean", *BASE,
        "--runner", "DataflowRunner", "--project", "my-project", "--region", "us-central1", "--temp_location",
        "gs://my-bucket/tmp", "--staging_location", "gs://my-bucket/staging", "--dry_run", "True", "--setup_file",
        str(REPO / "setup.py"), "--requirements_cache", "skip", "--no_save_main_session"])
    options = pipeline_options(beam_args)
    job = prepare(config, options)
    assert job.tokenizer.kind == "none"
    p = beam.Pipeline(options=options)
    build_pipeline(p, job)
    result = p.run()
    result.wait_until_finish()
    names = [t.unique_name for t in result.job.proto_pipeline.components.transforms.values()]
    labels = {name.removeprefix("TokenShards/").split("/")[0] for name in names}
    assert {"ReadChunks", "CleanText", "PlanLayout", "AssignShards", "GroupByShard", "WriteShards", "NameShards",
            "WriteDeadLetters", "WriteManifest"} <= labels
