"""The job on a real dask.distributed cluster through Beam's DaskRunner: the same bytes as DirectRunner, faults.

The cluster is the one a user starts (tests/dask_cluster.py): a `dask scheduler` and two `dask worker`
processes, each under its nanny, on loopback; the job reaches them with `--dask_client_address`.
Inputs and outputs are on the loopback S3 server (tests/s3_server.py) and, once, on a local
directory. What a real cluster does differently from DirectRunner is exercised here, not assumed:
the workers unpickle the job, elements cross processes, a shuffle is Dask's, a worker killed with
SIGKILL loses what it held (Dask runs those tasks again elsewhere), and a scheduler can go away.
"""

import dataclasses
import hashlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import apache_beam as beam
import pytest
import zstandard
from corpus_helpers import edit_word, output_digests, pile_line, run_free, write_lines
from dask_cluster import Driver, dask_cluster, kill_a_busy_worker
from s3_server import loopback_s3
from sample_corpus import write_sample_corpus

from pipeline.beam.execution import Execution, Workspace
from pipeline.beam.job import build_pipeline, output_format
from pipeline.beam.options import pipeline_options
from pipeline.beam.preflight import prepare
from pipeline.beam.runners.dask.profile import RUNTIME
from pipeline.beam.runners.dask.store import record_store
from pipeline.beam.runners.dask.tasks import Tasks
from pipeline.beam.runners.direct.runner import fn_api_runner
from pipeline.cli import run

pytestmark = pytest.mark.slow

BUCKET = "dask-bucket"
# Shards of 0.4 MB: a few per output, as many as the checks need (each shard costs Dask tasks in every shuffle).
FLAGS = ["--seq_len", "128", "--chunk_mb", "0.05", "--shard_size_mb", "0.4"]
SHARDS = (".tfrecord", ".bin")
DIRECT = ["--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
# Near dedup's graph (its star rounds) once; exact dedup with the other formats.
CASES = {"concat-near": ["--dedup", "near"], "best_fit-exact": ["--packing", "best_fit", "--dedup", "exact"],
         "megatron-exact-per_subset": ["--output_format", "megatron", "--dedup", "exact", "--per_subset"]}
TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{32}$")
TOKENIZING = re.compile(r"progress: (\d+(?:\.\d+)?)% of .* input tokenized")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The Pile's layout in three train files, the third with exact and near copies of the first's documents."""
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=3, docs_per_file=60)
    first = zstandard.ZstdDecompressor().decompress((root / "train" / "00.jsonl.zst").read_bytes(),
                                                    max_output_size=1 << 30).splitlines()
    third = root / "train" / "02.jsonl.zst"
    lines = zstandard.ZstdDecompressor().decompress(third.read_bytes(), max_output_size=1 << 30).splitlines()
    text = json.loads(first[5])["text"]
    copies = [first[3], first[7], pile_line(edit_word(text, len(text.split()) // 2, "edited"), "Pile-CC")]
    write_lines(str(third), lines[:20] + copies + lines[20:])
    return root


@pytest.fixture(scope="module")
def s3(corpus, tiny_model):
    """The corpus and the model on a loopback S3 server; yields (fs, env)."""
    with loopback_s3(BUCKET) as (fs, env):
        fs.put(str(corpus) + "/", f"{BUCKET}/pile/", recursive=True)
        fs.put_file(tiny_model, f"{BUCKET}/tiny.model")
        yield fs, env


@pytest.fixture(scope="module")
def cluster(s3, tmp_path_factory):
    """A scheduler and two worker processes that reach the S3 server as the job does."""
    _, env = s3
    with dask_cluster(tmp_path_factory.mktemp("cluster"), workers=2, env=env) as c:
        yield c


def _s3_argv(out: str, case: str) -> list[str]:
    return ["--input", f"s3://{BUCKET}/pile/train/*.jsonl.zst", "--output_dir", out,
            "--tokenizer_model", f"s3://{BUCKET}/tiny.model", *FLAGS, *CASES[case]]


def _s3_digests(fs, out: str) -> dict:
    """Every object's sha256 by its key under `out` without the run directory; the manifest run-free."""
    fs.invalidate_cache()
    root = out.removeprefix("s3://")
    digests = {}
    for key in sorted(fs.find(root)):
        name = run_free(key[len(root) + 1:])
        data = fs.cat_file(key)
        if name.endswith("dataset_info.json"):  # TFDS's shard template names the run directory
            data = run_free(data.decode()).encode()
        digests[name] = run_free(json.loads(data)) if name.endswith("manifest.json") else hashlib.sha256(
            data).hexdigest()
    return digests


@pytest.mark.parametrize("case", CASES)
def test_same_bytes_as_direct_runner_with_dedup_on_s3(case, s3, cluster):
    """TFRecord (concat, best_fit) and Megatron (a group per subset) shards, dead letters, removed/: DirectRunner's."""
    fs, _ = s3
    direct, dask = f"s3://{BUCKET}/direct-{case}", f"s3://{BUCKET}/dask-{case}"
    run.main(_s3_argv(direct, case) + DIRECT)
    run.main(_s3_argv(dask, case) + ["--runner", "DaskRunner", "--dask_client_address", cluster.address])
    expected, got = _s3_digests(fs, direct), _s3_digests(fs, dask)
    assert any("removed" in name for name in expected), "the corpus has no duplicates to remove"
    assert sum(name.endswith(SHARDS) for name in expected) >= 2, sorted(expected)
    assert got == expected


def _local_argv(corpus: Path, model: str, out: Path, *extra: str) -> list[str]:
    return ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            *FLAGS, *extra]


def test_same_bytes_on_a_local_directory_per_subset_and_decontaminated(corpus, tiny_model, cluster, tmp_path):
    """A local cluster reads and writes this machine's files: --per_subset and --decontaminate, as DirectRunner."""
    extra = ["--per_subset", "--decontaminate", str(_eval_file(corpus, tmp_path)), "--subsets", "Pile-CC,Github"]
    run.main(_local_argv(corpus, tiny_model, tmp_path / "direct", *extra) + DIRECT)
    run.main(_local_argv(corpus, tiny_model, tmp_path / "dask", *extra)
             + ["--runner", "DaskRunner", "--dask_client_address", cluster.address])
    expected = output_digests(tmp_path / "direct")
    assert any(name.startswith("Github/removed/") for name in expected), sorted(expected)
    assert output_digests(tmp_path / "dask") == expected


def test_the_graph_dask_runs_writes_direct_runners_bytes_on_direct_runner_too(corpus, tiny_model, tmp_path):
    """The same graph without a cluster: tasks that read their own work items, outputs carried in the element,
    joins for side inputs, record blocks through files of the output directory; DirectRunner runs it."""
    extra = ["--dedup", "near", "--decontaminate", str(_eval_file(corpus, tmp_path))]
    run.main(_local_argv(corpus, tiny_model, tmp_path / "direct", *extra) + DIRECT)
    config, beam_args = run.parse_args(_local_argv(corpus, tiny_model, tmp_path / "graph", *extra) + DIRECT)
    options = pipeline_options(beam_args)
    job = prepare(config, options)
    # Dask's plan for two threads, Dask's workspace (record files, tasks reading their own items, its Runtime).
    job = dataclasses.replace(job, execution=Execution(fan_out=False, workers=2, share=True, encode_threads=1))
    output_format(config).prepare(config)
    with record_store(config.output_dir) as sink, beam.Pipeline(runner=fn_api_runner(options), options=options) as p:
        build_pipeline(p, job, Workspace(sink, runtime=RUNTIME, reader=Tasks()))
    assert output_digests(tmp_path / "graph") == output_digests(tmp_path / "direct")


def _eval_file(corpus: Path, folder: Path) -> Path:
    """An eval set holding the start of a Github document of the corpus (decontamination removes it)."""
    evals = folder / "evals.jsonl"
    first = zstandard.ZstdDecompressor().decompress((corpus / "train" / "01.jsonl.zst").read_bytes(),
                                                    max_output_size=1 << 30).splitlines()
    doc = next(json.loads(line) for line in first if json.loads(line)["meta"]["pile_set_name"] == "Github")
    evals.write_text(json.dumps({"text": doc["text"][:400]}) + "\n")
    return evals


# -- faults ------------------------------------------------------------------------------------------


def _tokenizing(driver: Driver):
    """The first progress line of the tokenizing stage below 100%."""
    for match in TOKENIZING.finditer(driver.text()):
        if 0 < float(match.group(1)) < 100:
            return match


def _kill_a_busy_worker(cluster) -> bool:
    """`kill_a_busy_worker`, then wait for the nanny to start a new one; whether the one killed was busy."""
    pids = cluster.worker_pids()
    busy = kill_a_busy_worker(cluster)
    cluster.client.wait_for_workers(len(pids), timeout=120)  # the nanny starts a new one
    return busy


def _temp_files(out: Path) -> list[str]:
    return [str(p) for p in out.rglob("*") if TEMP.match(p.name)]


@pytest.fixture(scope="module")
def undisturbed(corpus, tiny_model, tmp_path_factory) -> dict:
    """What DirectRunner writes for the fault tests' job (many small shards: a long shard-writing stage)."""
    out = tmp_path_factory.mktemp("undisturbed") / "out"
    run.main(_local_argv(corpus, tiny_model, out, "--shard_size_mb", "0.02") + DIRECT)
    return output_digests(out)


@pytest.mark.parametrize("when", ["tokenizing", "writing shards"])
def test_a_worker_killed_midway_changes_nothing(when, corpus, tiny_model, cluster, undisturbed, tmp_path):
    """SIGKILL a worker process while it tokenizes, or once shards are being written: same bytes, no temp file."""
    out = tmp_path / "out"
    driver = Driver(_local_argv(corpus, tiny_model, out, "--shard_size_mb", "0.02", "--progress_every", "0.1",
                                 "--runner", "DaskRunner", "--dask_client_address", cluster.address),
                     tmp_path / "job.log")
    if when == "tokenizing":
        driver.wait_for(lambda: _tokenizing(driver), "progress of the tokenizing stage")
    else:
        driver.wait_for(lambda: list(out.glob("run-*/*.tfrecord")), "a shard written")
    assert _kill_a_busy_worker(cluster), "no worker was running a task"
    assert driver.finish() == 0, driver.text()[-3000:]
    assert not _temp_files(out)
    assert output_digests(out) == undisturbed


def test_a_lost_scheduler_fails_the_job_with_one_line_and_no_manifest(corpus, tiny_model, tmp_path):
    """Dask's own settings (no --dask_connection_timeout): the line comes at once, not after the clients'
    reconnection attempts (distributed.comm.timeouts.connect, 30 s) run out."""
    with dask_cluster(tmp_path / "cluster", workers=2) as own:
        out = tmp_path / "out"
        driver = Driver(_local_argv(corpus, tiny_model, out, "--progress_every", "0.1", "--runner", "DaskRunner",
                                     "--dask_client_address", own.address), tmp_path / "job.log")
        driver.wait_for(lambda: _tokenizing(driver), "progress of the tokenizing stage")
        os.kill(own.scheduler.pid, signal.SIGKILL)
        lost = time.monotonic()
        code = driver.finish(timeout=300)
        waited = time.monotonic() - lost
    text = driver.text()
    errors = [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]
    assert code == 1, text[-3000:]
    assert waited < 20, f"the job ended {waited:.0f} s after its scheduler was lost"
    assert len(errors) == 1 and "scheduler" in errors[0], text[-3000:]
    assert not list(out.rglob("manifest.json"))


def test_a_workers_address_is_refused_naming_the_flag(cluster):
    """A worker's address given for the scheduler's: one line before the job, not a client waiting for ever."""
    from pipeline.beam.runners.registry import profile_for
    from pipeline.core.options import UsageError

    worker = sorted(cluster.worker_pids())[0]
    options = pipeline_options(["--runner", "DaskRunner", "--dask_client_address", worker])
    with pytest.raises(UsageError, match=rf"^--dask_client_address {worker}: what answers at {worker} is a Dask "
                                         r"Worker, not a Dask scheduler$"):
        profile_for(options).plan(options, ["in.jsonl.zst"])
    assert profile_for(options := pipeline_options(["--runner", "DaskRunner", "--dask_client_address",
                                                    cluster.address])).plan(options, ["in.jsonl.zst"]).workers == 2


def test_each_worker_is_made_ready_for_the_jobs_length(cluster):
    """The warm-up plugin reaches every worker (malloc kept over Dask's own setting, modules imported and frozen)
    and leaves when the job ends; the scheduler's too."""
    import gc

    from pipeline.beam.runners.dask import warm

    def state(dask_worker):
        plugin = dask_worker.plugins.get(warm.NAME)
        return plugin is not None and plugin.kept, gc.get_freeze_count() > 0, "pipeline.beam.job" in sys.modules

    def scheduler_plugins(dask_scheduler):
        return sorted(dask_scheduler.plugins)

    with warm.warmed(cluster.address, "sentencepiece"):
        assert set(cluster.client.run(state).values()) == {(True, True, True)}
        assert warm.WarmScheduler.name in cluster.client.run_on_scheduler(scheduler_plugins)
    assert {kept for kept, _, _ in cluster.client.run(state).values()} == {False}
    assert warm.WarmScheduler.name not in cluster.client.run_on_scheduler(scheduler_plugins)


def test_global_combines_keep_their_defaults_without_side_inputs(cluster, tmp_path):
    """CombineGlobally and ToList on Dask (rewritten without side inputs): a value, and an empty input's default."""
    from pipeline.beam.runners.dask.overrides import DaskRunner

    def write(value, name):
        (tmp_path / name).write_text(json.dumps(value))

    options = pipeline_options(["--runner", "DaskRunner", "--dask_client_address", cluster.address])
    with beam.Pipeline(runner=DaskRunner(), options=options) as p:
        some, none = p | "Some" >> beam.Create([1, 2, 3]), p | "None" >> beam.Create([])
        results = [some | "Sum" >> beam.CombineGlobally(sum) | "WriteSum" >> beam.Map(write, "sum"),
                   none | "SumEmpty" >> beam.CombineGlobally(sum) | "WriteEmpty" >> beam.Map(write, "empty"),
                   none | "ListEmpty" >> beam.combiners.ToList() | "WriteList" >> beam.Map(write, "list"),
                   some | "Count" >> beam.combiners.Count.Globally() | "WriteCount" >> beam.Map(write, "count")]
        _ = results | beam.Flatten()  # Dask computes the last step's branch: every one ends in it
    p.result.client.close()
    assert {p.name: json.loads(p.read_text()) for p in tmp_path.iterdir()} == {"sum": 6, "empty": 0, "list": [],
                                                                              "count": 3}
