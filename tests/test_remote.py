"""Where workers run (each runner profile's `workers`), and the local paths refused where they cannot read them
(pipeline/beam/remote.py)."""

import pytest

from pipeline.beam import remote
from pipeline.beam.options import pipeline_options
from pipeline.core.options import UsageError

PATHS = [("--input", "/data/pile/*.jsonl.zst"), ("--tokenizer_model", "s3://bucket/m.model"),
         ("--output_dir", "gs://bucket/out")]


@pytest.mark.parametrize("flags,local,shared", [
    ([], True, False),
    (["--runner", "DirectRunner"], True, False),
    (["--runner", "PrismRunner"], True, False),
    (["--runner", "DataflowRunner"], False, False),
    (["--runner", "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner"], False, False),
    (["--runner", "FlinkRunner"], True, False),  # [auto]: a local Flink, LOOPBACK workers
    (["--runner", "FlinkRunner", "--flink_master", "[local]", "--environment_type", "DOCKER"], False, False),
    (["--runner", "FlinkRunner", "--flink_master", "10.0.0.5:8081"], False, False),
    (["--runner", "FlinkRunner", "--flink_master", "10.0.0.5:8081", "--environment_type", "EXTERNAL"], False, True),
    (["--runner", "FlinkRunner", "--flink_master", "10.0.0.5:8081", "--environment_type", "LOOPBACK"], True, False),
    (["--runner", "SparkRunner"], True, False),  # local[4]
    (["--runner", "SparkRunner", "--spark_master_url", "spark://h:7077", "--environment_type", "PROCESS"],
     False, True),
    (["--runner", "SparkRunner", "--output_executable_path", "job.jar", "--environment_type", "EXTERNAL"],
     False, True),
    (["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "LOOPBACK"], True, False),
    (["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "EXTERNAL"], True, False),
    (["--runner", "PortableRunner", "--job_endpoint", "embed"], False, False),  # Docker workers
    (["--runner", "PortableRunner", "--job_endpoint", "jobs.example:8099"], False, False),
    (["--runner", "DaskRunner"], True, False),  # a local cluster of worker processes
    (["--runner", "dask", "--dask_client_address", "127.0.0.1:8786"], True, False),
    (["--runner", "DaskRunner", "--dask_client_address", "tcp://localhost:8786"], True, False),
    (["--runner", "DaskRunner", "--dask_client_address", "tls://10.0.0.5:8786"], False, True),
    (["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner", "--dask_client_address", "sched.example:8786"],
     False, True),
    (["--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.5:8786"], True, False),  # loopback
    (["--runner", "DaskRunner", "--dask_client_address", "tcp://[::1]:8786"], True, False),
    (["--runner", "DaskRunner", "--dask_client_address", "tcp://127.x.invalid:8786"], False, True),  # a name
    (["--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.1.example:8786"], False, True),
    # Runners no profile names: elsewhere, on the cluster's hosts with a PROCESS or EXTERNAL environment.
    (["--runner", "JetRunner", "--environment_type", "PROCESS"], False, True),
    (["--runner", "SamzaRunner", "--environment_type", "EXTERNAL"], False, True),
    (["--runner", "JetRunner"], False, False),
])
def test_where_the_workers_run(flags, local, shared):
    workers = remote.workers_of(pipeline_options(flags))
    assert (workers.local, workers.shared_mounts) == (local, shared)


@pytest.mark.parametrize("runner", ["JetRunner", "SamzaRunner"])
def test_a_runner_no_profile_names_gets_no_local_input(runner):
    options = pipeline_options(["--runner", runner, "--environment_type", "PROCESS"])
    with pytest.raises(UsageError, match=rf"^--input /data/pile/\*\.jsonl\.zst: a local path, but {runner}'s workers "
                                         r"run elsewhere and cannot read this machine's files; use s3:// or gs:// "
                                         r"URLs or a network filesystem mounted on every worker host \(EFS, NFS\)$"):
        remote.check_workers_can_read(options, PATHS)


def test_urls_are_never_local():
    assert remote.is_local_path("/a/b") and remote.is_local_path("rel/x*.zst") and remote.is_local_path("file:///x")
    assert not remote.is_local_path("s3://b/x") and not remote.is_local_path("gs://b/x")


def test_local_paths_are_refused_for_remote_workers_naming_each_flag():
    options = pipeline_options(["--runner", "DataflowRunner"])
    with pytest.raises(UsageError, match=r"^--input /data/pile/\*\.jsonl\.zst: a local path, but DataflowRunner's "
                                         r"workers are Google Cloud VMs and cannot read this machine's files; use "
                                         r"s3:// or gs:// URLs$"):
        remote.check_workers_can_read(options, PATHS)
    remote.check_workers_can_read(options, PATHS[1:])
    remote.check_workers_can_read(pipeline_options([]), PATHS)


def test_a_network_filesystem_is_accepted_where_workers_share_the_hosts_mounts(tmp_path):
    efs = tmp_path / "efs"
    (efs / "pile").mkdir(parents=True)
    mounts = (f"/dev/root / ext4 rw 0 0\nfs-1.efs.us-east-1.amazonaws.com:/ {efs} nfs4 rw,vers=4.1 0 0\n"
              f"tmpfs {tmp_path}/with\\040space tmpfs rw 0 0\n")
    assert remote.filesystem_type(str(efs / "pile" / "*.jsonl.zst"), mounts) == "nfs4"
    assert remote.filesystem_type(str(efs / "out" / "not-yet"), mounts) == "nfs4"  # nearest existing parent
    assert remote.filesystem_type(str(tmp_path / "elsewhere"), mounts) == "ext4"
    paths = [("--input", str(efs / "pile" / "*.jsonl.zst")), ("--output_dir", str(tmp_path / "local-out"))]
    shared = remote.Workers(False, True, "FlinkRunner's workers run on the cluster at h:8081")
    assert remote.paths_workers_cannot_read(shared, paths, mounts) == [paths[1]]
    docker = remote.Workers(False, False, "the workers run in Docker containers")
    assert remote.paths_workers_cannot_read(docker, paths, mounts) == paths


def test_a_dask_scheduler_file_names_where_the_workers_run(tmp_path):
    """--dask_scheduler_file (Slurm, dask-jobqueue, dask-mpi): the scheduler's address is read from it."""
    remote_file, local_file = tmp_path / "remote.json", tmp_path / "local.json"
    remote_file.write_text('{"type": "Scheduler", "address": "tcp://10.1.2.3:8786"}')
    local_file.write_text('{"type": "Scheduler", "address": "tcp://127.0.0.1:8786"}')
    far = remote.workers_of(pipeline_options(["--runner", "DaskRunner", "--dask_scheduler_file", str(remote_file)]))
    near = remote.workers_of(pipeline_options(["--runner", "DaskRunner", "--dask_scheduler_file", str(local_file)]))
    assert (far.local, far.shared_mounts, near.local) == (False, True, True)
    with pytest.raises(UsageError, match=r"^--input /data/pile/\*\.jsonl\.zst: a local path, but DaskRunner's "
                                         r"workers run on the cluster of the scheduler at tcp://10\.1\.2\.3:8786 "
                                         r"and cannot read this machine's files; use s3:// or gs:// URLs or a "
                                         r"network filesystem mounted on every worker host \(EFS, NFS\)$"):
        remote.check_workers_can_read(pipeline_options(["--runner", "DaskRunner", "--dask_scheduler_file",
                                                        str(remote_file)]), PATHS)
