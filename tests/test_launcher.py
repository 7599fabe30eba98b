"""trainers/launch_sagemaker.py: the SageMaker job request, printed offline and submitted to a local
AWS-compatible server (moto in server mode on 127.0.0.1), then read back.

moto keeps these CreateTrainingJob fields and returns them from DescribeTrainingJob: name,
hyperparameters, algorithm specification, role, input/output data config, resource config, VPC
config, stopping condition, checkpoint config, TensorBoard output config. It drops ProfilerConfig
and Environment; those are checked in the request itself (which botocore validated against the
SageMaker API model before the server saw it).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import ipaddress
import json
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EFS = ["--efs_id", "fs-0123456789abcdef0", "--subnets", "subnet-0a,subnet-0b", "--security_group_ids", "sg-0c"]


def _require_sdk():
    if importlib.util.find_spec("sagemaker") is None:
        reason = "the SageMaker Python SDK (sagemaker>=2.245,<3) is not installed"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def launcher():
    _require_sdk()
    from trainers import launch_sagemaker

    return launch_sagemaker


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection to an address outside 127.0.0.0/8 or ::1 fails the test."""
    real_connect = socket.socket.connect
    attempts = []

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = host == "localhost"
        if not ok:
            attempts.append(address)
            raise OSError(f"test: connection to {address} refused (loopback only)")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", _loopback_getaddrinfo(socket.getaddrinfo, attempts))
    yield attempts
    assert attempts == [], f"network access attempted: {attempts}"


def _loopback_getaddrinfo(real, attempts):
    def getaddrinfo(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1", None):
            attempts.append(host)
            raise socket.gaierror(f"test: name lookup of {host} refused (loopback only)")
        return real(host, *args, **kwargs)

    return getaddrinfo


def _bundle_names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return sorted(tar.getnames())


@pytest.mark.parametrize("trainer", ["horovod", "smddp", "smp"])
def test_dry_run_builds_the_full_request_without_aws(launcher, loopback_only, trainer, capsys):
    result = launcher.launch(["--trainer", trainer, "--dry_run", "--job_name", f"dry-{trainer}", *EFS,
                              "--hp", "model=xl", "--hp", "max_steps=20000", "--hp", "mixed_precision=true"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["request"] == json.loads(json.dumps(result["request"], default=str))
    req = result["request"]
    # The defaults: 10 x ml.p3.16xlarge, data on EFS through the job's VPC.
    assert req["ResourceConfig"]["InstanceType"] == "ml.p3.16xlarge"
    assert req["ResourceConfig"]["InstanceCount"] == 10
    assert req["VpcConfig"] == {"Subnets": ["subnet-0a", "subnet-0b"], "SecurityGroupIds": ["sg-0c"]}
    channels = {c["ChannelName"]: c["DataSource"]["FileSystemDataSource"] for c in req["InputDataConfig"]}
    assert channels["train"] == {"FileSystemId": "fs-0123456789abcdef0", "FileSystemType": "EFS",
                                 "DirectoryPath": "/pile/tokens/train", "FileSystemAccessMode": "ro"}
    assert channels["val"]["DirectoryPath"] == "/pile/tokens/val"
    assert "tensorflow-training" in req["AlgorithmSpecification"]["TrainingImage"]
    # Debugger's system profiler (GPU/CPU/I/O utilisation) and TensorBoard output are on.
    assert req["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 500
    assert req["TensorBoardOutputConfig"]["LocalPath"] == "/opt/ml/output/tensorboard"
    assert req["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    hp = {k: json.loads(v) for k, v in req["HyperParameters"].items()}
    assert hp["model"] == "xl" and hp["max_steps"] == "20000"
    assert "model_dir" not in hp
    assert hp["sagemaker_submit_directory"] == result["source_bundle"]["uri"]
    if trainer == "smp":
        assert hp["sagemaker_program"] == "trainers/train_smp.py"
        assert hp["sagemaker_mpi_enabled"] is True and hp["sagemaker_mpi_num_of_processes_per_host"] == 8
        mp = json.loads(hp["mp_parameters"]) if isinstance(hp["mp_parameters"], str) else hp["mp_parameters"]
        assert mp["partitions"] == 2 and mp["microbatches"] == 4 and mp["horovod"] is True
    elif trainer == "smddp":
        assert hp["sagemaker_program"] == "trainers/train_horovod.py" and hp["backend"] == "smddp"
        assert hp["sagemaker_distributed_dataparallel_enabled"] is True
    else:
        assert hp["sagemaker_program"] == "trainers/train_horovod.py" and hp["backend"] == "horovod"
        assert hp["sagemaker_mpi_enabled"] is True and hp["sagemaker_mpi_num_of_processes_per_host"] == 8


def test_dry_run_refuses_any_other_request(launcher):
    # The refusal is the launcher's own, not only the test's socket guard.
    import requests

    args = launcher.build_parser().parse_args(["--dry_run", *EFS])
    capture: dict = {}
    boto, session = launcher.make_session(args, capture)
    try:
        with pytest.raises(launcher.DryRunViolation):
            session.sagemaker_client.describe_training_job(TrainingJobName="x")
        with pytest.raises(launcher.DryRunViolation):
            boto.client("s3").list_buckets()
        with pytest.raises(launcher.DryRunViolation):
            requests.get("https://example.invalid/telemetry")
    finally:
        capture["restore_http"]()
    assert requests.Session.send.__qualname__ == "Session.send"  # put back afterwards


def test_source_bundle_holds_the_trainers_and_the_reader(launcher):
    names = _bundle_names(launcher.package_source())
    for required in ("trainers/train_horovod.py", "trainers/train_smp.py", "trainers/model.py",
                     "trainers/data_parallel.py", "pipeline/tfdata.py", "pipeline/format/manifest.py",
                     "pipeline/format/records.py", "pipeline/__init__.py", "requirements.txt"):
        assert required in names
    assert not [n for n in names if n.startswith(("pipeline/run", "pipeline/beam", "pipeline/cli", ".venv"))]
    assert "trainers/launch_sagemaker.py" not in names  # runs on the submitting machine only
    assert launcher.package_source() == launcher.package_source()  # deterministic bytes


@pytest.mark.slow
def test_the_bundle_alone_imports_the_trainers_and_the_reader(launcher, tmp_path):
    with tarfile.open(fileobj=io.BytesIO(launcher.package_source()), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    code = "import pipeline.tfdata, trainers.data_parallel, trainers.train_horovod, trainers.train_smp"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]


def test_s3_input_and_missing_efs_settings(launcher, loopback_only, capsys):
    result = launcher.launch(["--dry_run", "--data", "s3", "--s3_train", "s3://bucket/tokens/train",
                              "--instance_count", "2", "--job_name", "s3-job"])
    (train,) = result["request"]["InputDataConfig"]
    assert train["DataSource"]["S3DataSource"]["S3Uri"] == "s3://bucket/tokens/train/"
    assert train["InputMode"] == "FastFile" and "VpcConfig" not in result["request"]
    with pytest.raises(SystemExit, match="--efs_id"):
        launcher.launch(["--dry_run", "--job_name", "x"])


@pytest.fixture
def moto_server(monkeypatch):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["horovod", "smp"])
def test_submit_to_a_local_server_and_read_it_back(launcher, moto_server, loopback_only, trainer, capsys):
    import boto3

    assert moto_server.startswith("http://127.0.0.1:")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    s3.create_bucket(Bucket="pile-training-test")
    role = "arn:aws:iam::123456789012:role/SageMakerRole"
    job = f"moto-{trainer}"
    result = launcher.launch(["--trainer", trainer, "--endpoint_url", moto_server, "--role", role,
                              "--bucket", "pile-training-test", "--job_name", job, *EFS,
                              "--hp", "model=small"])
    request = result["request"]
    sm = boto3.client("sagemaker", endpoint_url=moto_server, region_name="us-east-1")
    back = sm.describe_training_job(TrainingJobName=job)
    for field in ("TrainingJobName", "HyperParameters", "RoleArn", "InputDataConfig", "OutputDataConfig",
                  "ResourceConfig", "VpcConfig", "StoppingCondition", "CheckpointConfig",
                  "TensorBoardOutputConfig"):
        assert back[field] == request[field], field
    assert back["AlgorithmSpecification"]["TrainingImage"] == request["AlgorithmSpecification"]["TrainingImage"]
    assert back["RoleArn"] == role and back["ResourceConfig"]["InstanceCount"] == 10
    # The code bundle the job points at is in the (local) bucket and holds the entry point.
    uri = json.loads(back["HyperParameters"]["sagemaker_submit_directory"])
    bucket, key = uri[len("s3://"):].split("/", 1)
    names = _bundle_names(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert json.loads(back["HyperParameters"]["sagemaker_program"]) in names


@pytest.mark.slow
def test_cli_prints_only_json_on_stdout():
    _require_sdk()
    proc = subprocess.run([sys.executable, "-m", "trainers.launch_sagemaker", "--trainer", "smp", "--dry_run",
                           "--job_name", "cli", *EFS], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["dry_run"] is True and out["request"]["TrainingJobName"] == "cli"
