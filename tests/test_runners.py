"""Runners: every beam_configs/ file, Dataflow's offline dry run, and the portable job-service path.

The same code must run on DirectRunner, Dataflow, Flink and Spark. What can be checked on one
machine without a network: each config parses into the options its runner reads; Dataflow
translates and builds the whole job (the package's sdist included) with `--dry_run True`; and
PortableRunner (the path Flink and Spark take) writes the same bytes as DirectRunner.
"""

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PortableOptions,
    SetupOptions,
    SparkRunnerOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability import portable_runner
from corpus_helpers import file_digest, run_free
from sample_corpus import write_sample_corpus

from pipeline.beam import options as beam_options
from pipeline.beam.job import build_pipeline
from pipeline.beam.preflight import prepare
from pipeline.beam.runners.direct.runner import NO_TIMED_FLUSH_MS, fn_api_runner
from pipeline.cli import run
from pipeline.core.options import PLACEHOLDER

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(glob.glob(str(REPO / "beam_configs" / "*.toml")))
STAGES = {"ListInputs", "ReadChunks", "FanOut", "TokenizeAndPack", "GroupTailsByFile", "PackTails",
          "GroupLastTails", "PackFinal", "AssignShards", "GroupByShard", "WriteShards",
          "WriteDeadLetters", "SumStats", "WriteManifest"}
REQUIRED = ["--input", "in/*.jsonl.zst", "--output_dir", "/tmp/out", "--tokenizer_model", "m.model"]
# What a real Dataflow job replaces of beam_configs/dataflow.toml's placeholders.
DATAFLOW_PROJECT = ["--project", "real-project", "--temp_location", "gs://real-bucket/tmp",
                    "--staging_location", "gs://real-bucket/staging"]
DATAFLOW = ["--runner", "DataflowRunner", "--project", "my-project", "--region", "us-central1",
            "--temp_location", "gs://my-bucket/tmp", "--staging_location", "gs://my-bucket/staging",
            "--dry_run", "True"]


def _digests(out: Path) -> dict:
    """Every file's sha256, by its path without the run directory; the manifest without the run id."""
    digests = {run_free(str(p.relative_to(out))): file_digest(p)
               for p in sorted(out.rglob("*")) if p.is_file() and p.name != "manifest.json"}
    digests["manifest.json"] = run_free(json.loads((out / "manifest.json").read_text()))
    return digests


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A small corpus in the Pile's layout: train/00..02.jsonl.zst, val, test."""
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=3, docs_per_file=40)
    return root


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection in this process fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:] if len(args) > 1 else args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_there_is_a_config_per_runner():
    names = {Path(c).stem for c in CONFIGS}
    assert {"direct", "dataflow", "flink", "spark_emr", "portable_embed"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_every_config_parses_and_every_beam_key_is_a_beam_flag(path):
    table = tomllib.loads(Path(path).read_text())
    assert set(table) <= {"pipeline", "beam"}
    # Placeholders (`my-project`) must be replaced on the command line; the rest comes from the file.
    placeholders = {k: v for k, v in table["beam"].items() if isinstance(v, str) and PLACEHOLDER.search(v)}
    replaced = [a for k in placeholders for a in (f"--{k}", f"gs://real/{k}" if k.endswith("location") else "real")]
    config, beam_args = run.parse_args(["--config", path, *REQUIRED, *replaced])
    options = beam_options.pipeline_options(beam_args)
    parsers = []
    known = options.get_all_options(drop_default=False, add_extra_args_fn=parsers.append)
    # Where a flag's value is kept (DaskRunner's --dask_client_address is `address`).
    dest = {opt[2:]: action.dest for action in parsers[0]._actions for opt in action.option_strings}
    for key, value in table["beam"].items():
        if key in placeholders:
            assert known[key] != value, key
        elif key.startswith("no_") and value is True:  # Beam's negative flags: no_save_main_session
            assert known.get(key[3:]) is False, f"{path}: {key} is not a Beam flag"
        elif isinstance(value, bool):
            assert known.get(key) is value, f"{path}: {key} is not a Beam flag"
        else:
            assert dest.get(key, key) in known, f"{path}: {key} is not a Beam flag"
            assert str(known[dest.get(key, key)]) == str(value), key
    for key, value in table.get("pipeline", {}).items():
        assert getattr(config, key) == value, key


def _runner_options(name: str) -> tuple:
    """(config, the pipeline options a portable job service receives) of beam_configs/NAME.toml."""
    extra = DATAFLOW_PROJECT if name == "dataflow" else []
    config, beam_args = run.parse_args(["--config", str(REPO / "beam_configs" / f"{name}.toml"), *REQUIRED, *extra])
    options = beam_options.pipeline_options(beam_args)
    sent = portable_runner.JobServiceHandle.encode_pipeline_options(options.get_all_options())
    # The Java runners read `beam:option:storage_level:v1` as the option `storageLevel`.
    java = {"".join(w if i == 0 else w.title() for i, w in enumerate(k[len("beam:option:"):-len(":v1")].split("_"))): v
            for k, v in sent.items()}
    return config, options, java


@pytest.mark.parametrize("name", ["flink", "spark_emr"])
def test_cluster_configs_use_every_core_and_bound_what_a_group_holds(name):
    config, _, java = _runner_options(name)
    # One Python SDK worker per core (Beam: cores - 1 per TaskManager/executor); Beam's default is 1.
    assert java["sdkWorkerParallelism"] == "0"
    assert java["environmentType"] == "EXTERNAL"
    # Flink and Spark hand a group to the SDK worker as one message: shards of 256 MiB, not 1 GiB.
    assert config.shard_size_mb == 256


def test_spark_caches_multi_output_stages_on_disk_and_flink_exchanges_through_disk():
    _, _, spark = _runner_options("spark_emr")
    # SparkPipelineOptions.storageLevel (Beam's default MEMORY_ONLY recomputes evicted partitions).
    assert spark["storageLevel"] == "MEMORY_AND_DISK_SER"
    _, _, flink = _runner_options("flink")
    # FlinkPipelineOptions.executionModeForBatch: Beam's advice for jobs that branch and join (FLINK-10672).
    assert flink["executionModeForBatch"] == "BATCH_FORCED"
    assert "storageLevel" not in flink and "executionModeForBatch" not in spark


def test_dataflow_config_runs_one_bundle_per_vcpu():
    _, options, _ = _runner_options("dataflow")
    workers = options.view_as(WorkerOptions)
    vcpus = int(workers.machine_type.rsplit("-", 1)[1])
    # Dataflow starts one Python SDK process per vCPU; more bundles than vCPUs only add memory.
    assert options.view_as(DebugOptions).number_of_worker_harness_threads == vcpus
    assert workers.disk_size_gb >= 50  # the spool and the upload copy of the shards being written


def test_config_values_are_overridden_by_the_command_line():
    config, beam_args = run.parse_args(
        ["--config", str(REPO / "beam_configs" / "dataflow.toml"), *REQUIRED, *DATAFLOW_PROJECT, "--seq_len", "512",
         "--region", "europe-west4", "--machine_type", "n2-standard-8", "--max_num_workers", "7"]
    )
    options = beam_options.pipeline_options(beam_args)
    assert config.seq_len == 512
    assert options.view_as(GoogleCloudOptions).region == "europe-west4"
    assert options.view_as(GoogleCloudOptions).project == "real-project"
    assert options.view_as(GoogleCloudOptions).job_name == "pile-tokenize"  # from the file
    assert options.view_as(WorkerOptions).machine_type == "n2-standard-8"
    assert options.view_as(WorkerOptions).max_num_workers == 7

    _, beam_args = run.parse_args(["--config", str(REPO / "beam_configs" / "flink.toml"), *REQUIRED,
                                   "--flink_master", "10.0.0.5:8081", "--parallelism", "8"])
    flink = beam_options.pipeline_options(beam_args).view_as(FlinkRunnerOptions)
    assert (flink.flink_master, flink.parallelism, flink.flink_version) == ("10.0.0.5:8081", 8, "1.19")

    _, beam_args = run.parse_args(["--config", str(REPO / "beam_configs" / "spark_emr.toml"), *REQUIRED,
                                   "--environment_config", "img:2"])
    options = beam_options.pipeline_options(beam_args)
    assert options.view_as(StandardOptions).runner == "SparkRunner"
    assert options.view_as(SparkRunnerOptions).spark_version == "3"
    assert options.view_as(PortableOptions).environment_config == "img:2"

    _, beam_args = run.parse_args(["--config", str(REPO / "beam_configs" / "direct.toml"), *REQUIRED,
                                   "--direct_num_workers", "3"])
    assert beam_options.pipeline_options(beam_args).view_as(DirectOptions).direct_num_workers == 3

    _, beam_args = run.parse_args(["--config", str(REPO / "beam_configs" / "dataflow.toml"), *REQUIRED,
                                   *DATAFLOW_PROJECT, "--setup_file", ""])
    assert beam_options.pipeline_options(beam_args).view_as(SetupOptions).setup_file is None


def test_dry_run_false_means_false():
    options = beam_options.pipeline_options(DATAFLOW[:-1] + ["False"])
    assert options.view_as(beam.options.pipeline_options.TestOptions).dry_run is False
    with pytest.raises(ValueError, match="--dry_run"):
        beam_options.pipeline_options(DATAFLOW[:-1] + ["maybe"])


@pytest.mark.slow
def test_dataflow_dry_run_translates_the_whole_job_offline(corpus, tiny_model, no_network):
    """The real pipeline, translated for Dataflow Runner v2 and built with the package's sdist."""
    argv = ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", "gs://my-bucket/pile/train",
            "--tokenizer_model", tiny_model, *DATAFLOW, "--setup_file", str(REPO / "setup.py"),
            "--requirements_file", str(REPO / "beam_configs" / "worker_requirements.txt"),
            "--requirements_cache", "skip", "--no_save_main_session"]
    config, beam_args = run.parse_args(argv)
    options = beam_options.pipeline_options(beam_args)
    p = beam.Pipeline(options=options)
    build_pipeline(p, prepare(config, options))
    result = p.run()
    result.wait_until_finish()
    assert result.state == "DONE"

    proto = result.job.proto_pipeline
    # The job is one composite, TokenShards (pipeline/beam/transform.py): its stages one level down.
    names = [t.unique_name for t in proto.components.transforms.values()]
    labels = {name.removeprefix("TokenShards/").split("/")[0] for name in names}
    assert "TokenShards" in names
    assert STAGES <= labels
    (env,) = proto.components.environments.values()
    assert env.urn == "beam:env:docker:v1"
    image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
    assert f"beam_python3.11_sdk:{beam.__version__}" in image
    staged = {beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload).staged_name:
              beam_runner_api_pb2.ArtifactFilePayload.FromString(d.type_payload).path
              for d in env.dependencies}
    # The sdist of this package is how the code reaches the workers; they pip-install it at start,
    # with the worker requirements (the Beam job's packages, cloud I/O, the fast backends).
    with tarfile.open(staged["workflow.tar.gz"]) as sdist:
        names = sdist.getnames()
        assert any(n.endswith("/pipeline/beam/tfrecord/output.py") for n in names)
        assert any(n.endswith("/pyproject.toml") for n in names)
    with open(staged["requirements.txt"]) as f:
        requires = [line.split("==")[0] for line in f.read().splitlines() if line and not line.startswith("#")]
    assert {"gcsfs", "s3fs", "zstandard", "sentencepiece", "google-crc32c"} <= set(requires)
    assert result.job.proto.type_.name == "JOB_TYPE_BATCH"
    assert result.job.google_cloud_options.temp_location.startswith("gs://my-bucket/tmp/")


@pytest.mark.slow
def test_dataflow_dry_run_from_the_config_file_with_a_worker_image(corpus, tiny_model, tmp_path, no_network,
                                                                   caplog):
    """`python -m pipeline.run --config beam_configs/dataflow.toml --dry_run True` touches no output.

    Local paths are allowed in a dry run (it only translates the job here), with a warning that a
    real run refuses them.
    """
    out = tmp_path / "untouched"
    manifest = run.main(["--config", str(REPO / "beam_configs" / "dataflow.toml"), "--dry_run", "True",
                         *DATAFLOW_PROJECT, "--setup_file", "",
                         "--sdk_container_image", "us-docker.pkg.dev/my-project/beam/pile-pipeline:0.1.0",
                         "--input", str(corpus / "val.jsonl.zst"), "--output_dir", str(out),
                         "--tokenizer_model", tiny_model])
    assert manifest is None
    assert not out.exists()
    assert any("local paths, but DataflowRunner's workers are Google Cloud VMs" in r.getMessage()
               and "a real run stops on this" in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def direct_run(corpus, tiny_model, tmp_path_factory):
    """(argv, output directory, manifest, file digests) of a DirectRunner run; later runs reuse the directory."""
    out = tmp_path_factory.mktemp("runners") / "out"
    # The manifest records the config: the same directory and flags for every runner compared.
    argv = ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(out),
            "--tokenizer_model", tiny_model, "--seq_len", "128", "--chunk_mb", "0.05",
            "--shard_size_mb", "0.1", "--document_boundaries", "--overwrite"]
    manifest = run.main(argv + ["--runner", "DirectRunner", "--direct_running_mode", "in_memory",
                                "--direct_num_workers", "1"])
    assert len(manifest["shards"]) > 2 and manifest["packing"]["records_from_tails"] > 0
    return argv, out, manifest, _digests(out)


@pytest.fixture
def job_service_spy(monkeypatch):
    """Counts pipelines submitted through a portable job service."""
    submitted = []
    original = portable_runner.JobServiceHandle.submit

    def spy(self, *args, **kwargs):
        submitted.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(portable_runner.JobServiceHandle, "submit", spy)
    return submitted


@pytest.mark.slow
def test_portable_runner_writes_the_same_bytes_as_direct_runner(direct_run, job_service_spy):
    """PortableRunner (embedded job service, LOOPBACK worker) == DirectRunner, every file, manifest included."""
    argv, out, manifest, digests = direct_run
    portable = run.main(argv + ["--config", str(REPO / "beam_configs" / "portable_embed.toml")])
    assert job_service_spy, "PortableRunner did not go through the job service"
    assert _digests(out) == digests
    assert run_free(portable) == run_free(manifest)
    assert not [f for f in os.listdir(out) if ".tmp-" in f]


@pytest.mark.slow
def test_direct_runner_jobs_run_on_the_fn_api_runner_never_prism(direct_run, monkeypatch):
    """Beam's DirectRunner would try Prism (a binary it downloads) where the network allows: ours never do."""
    from apache_beam.runners.portability import prism_runner

    def refuse(*_, **__):
        raise AssertionError("a DirectRunner job went to the Prism runner")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)
    monkeypatch.setattr(prism_runner.PrismJobServer, "__init__", refuse)
    argv, out, manifest, digests = direct_run
    again = run.main(argv + ["--runner", "DirectRunner", "--direct_num_workers", "2"])
    assert _digests(out) == digests and run_free(again) == run_free(manifest)
    options = beam_options.pipeline_options(["--runner", "DirectRunner"])
    assert type(beam_options.runner_object(options)).__name__ == "FnApiRunner"
    assert beam_options.runner_object(beam_options.pipeline_options(["--runner", "PortableRunner"])) is None


@pytest.mark.slow
def test_external_worker_pool_writes_the_same_bytes(direct_run, job_service_spy):
    """SDK workers from a separate worker pool (EXTERNAL environment: how EMR nodes run them) == DirectRunner."""
    argv, out, manifest, digests = direct_run
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             "--service_port", str(port)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # the pool is ready once it accepts connections
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert pool.poll() is None and time.monotonic() < deadline, "the worker pool did not start"
            time.sleep(0.2)
        external = run.main(argv + ["--runner", "PortableRunner", "--job_endpoint", "embed",
                                    "--environment_type", "EXTERNAL", "--environment_config", f"localhost:{port}"])
    finally:
        os.killpg(pool.pid, signal.SIGTERM)
        pool.wait(timeout=30)
    assert job_service_spy
    assert _digests(out) == digests
    assert run_free(external) == run_free(manifest)


class _SlowToPickle:
    """An element whose pickling runs Python code and lets other threads run meanwhile (as numpy's does)."""

    def __init__(self, n):
        self.n = n

    def __reduce__(self):
        time.sleep(0.004)
        return _SlowToPickle, (self.n,)


@pytest.mark.slow
def test_worker_threads_never_send_half_an_element(caplog):
    """DirectRunner's worker threads without Beam's timed flush: every element crosses whole.

    With it (a flush every second from a timer thread), an element whose encoding lets the GIL go
    was sent in two halves and the job failed to decode it, or ran out of memory on a wrong length.
    """
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms.environments import EmbeddedPythonGrpcEnvironment

    options = beam_options.pipeline_options(["--runner", "DirectRunner", "--direct_num_workers", "2",
                                             "--direct_running_mode", "multi_threading"])
    runner = fn_api_runner(options)
    environment = runner._default_environment  # noqa: SLF001 -- what the runner was handed, checked
    assert isinstance(environment, EmbeddedPythonGrpcEnvironment)
    assert environment.data_buffer_time_limit_ms == NO_TIMED_FLUSH_MS
    with beam.Pipeline(runner=runner, options=options) as p:
        counted = (p | beam.Create(range(4)) | "Spread" >> beam.Reshuffle()
                   | beam.FlatMap(lambda i: [(i * 1000 + k, _SlowToPickle(k)) for k in range(300)])
                   | "Across" >> beam.Reshuffle()  # 1,200 elements of ~4 ms each to encode: > 2 s of it
                   | beam.Map(lambda kv: kv[1].n) | beam.combiners.Count.Globally())
        assert_that(counted, equal_to([1200]))
    assert "direct_running_mode should be" not in caplog.text  # Beam's advice: not for our threads
