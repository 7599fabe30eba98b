"""Launch the trainers as SageMaker training jobs (SageMaker Python SDK v2, `sagemaker.tensorflow`).

    # Print the full CreateTrainingJob request; no AWS call is made (none can be: any request that
    # is not the intercepted CreateTrainingJob is refused before it is sent):
    python -m trainers.launch_sagemaker --trainer horovod --dry_run \
        --efs_id fs-0123456789abcdef0 --subnets subnet-aaa --security_group_ids sg-bbb

    # Submit for real (credentials from the environment or the instance role):
    python -m trainers.launch_sagemaker --trainer smp --role arn:aws:iam::111122223333:role/SageMaker \
        --bucket my-bucket --efs_id fs-... --subnets subnet-... --security_group_ids sg-... \
        --hp model=xl --hp max_steps=20000 --hp batch_size=8 --hp mixed_precision=true

Trainers: `horovod` (trainers/train_horovod.py under MPI), `smddp` (the same script with SageMaker's
data-parallel library), `smp` (trainers/train_smp.py with SageMaker model parallelism). Defaults:
10 x ml.p3.16xlarge (8 V100 each, one process per GPU), the pipeline's output on EFS
(file-system input: needs the VPC subnets and security groups that reach the file system), or on S3
(`--data s3`, FastFile mode). TensorBoard output and SageMaker Debugger's system profiler (GPU, CPU,
I/O utilisation: what shows whether the input pipeline is the bottleneck) are on.

Only the files the trainers need (trainers/ without this launcher, the reader's modules of pipeline/,
requirements.txt) are packed into sourcedir.tar.gz, uploaded to `--code_location` and passed to the SDK as an S3
`source_dir`, so the SDK uploads nothing itself. `--endpoint_url` sends the SageMaker and S3 calls to
another AWS-compatible endpoint (e.g. a local moto server in tests).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import io
import json
import logging
import os
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = Path(__file__).resolve().relative_to(REPO).as_posix()  # runs here, not in the job: left out of the bundle
# v2's framework estimators (the ones with `distribution`) warn that v2 is being phased out.
os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
# What the trainers import at run time: the reader and the layers below it (tests/test_launcher.py
# imports the trainers from the bundle alone).
SOURCE_FILES = ["pipeline/__init__.py", "pipeline/tfdata.py"]
SOURCE_DIRS = ["trainers", "pipeline/reader", "pipeline/format", "pipeline/core"]
REQUIREMENTS = "fsspec>=2023.1.0\n"  # the rest (TensorFlow, NumPy, Horovod/smdistributed) is in the image

TRAINERS = {
    # name: entry point, default TF version (newest SageMaker TF training image that supports the
    # library), Python version of that image
    "horovod": {"entry_point": "trainers/train_horovod.py", "framework_version": "2.14", "py_version": "py310"},
    # smdistributed.dataparallel supports TensorFlow up to 2.11 (SageMaker Python SDK's check).
    "smddp": {"entry_point": "trainers/train_horovod.py", "framework_version": "2.11", "py_version": "py39"},
    # smdistributed.modelparallel's TensorFlow API (v1.x) was released for TF 2.3 - 2.6.
    "smp": {"entry_point": "trainers/train_smp.py", "framework_version": "2.6", "py_version": "py38"},
}
DRY_RUN_ROLE = "arn:aws:iam::111122223333:role/SageMakerTrainingRole-DRY-RUN"
DRY_RUN_ACCOUNT_BUCKET = "sagemaker-dry-run-bucket"

log = logging.getLogger("launch_sagemaker")


class DryRunViolation(RuntimeError):
    """A request other than the intercepted CreateTrainingJob was about to leave the process."""


def build_parser() -> argparse.ArgumentParser:
    """The launcher's flags (the trainer's own flags go in --hp)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainer", choices=sorted(TRAINERS), default="horovod")
    p.add_argument("--dry_run", action="store_true", help="print the request; call no AWS API")
    p.add_argument("--region", default=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    p.add_argument("--endpoint_url", default=None,
                   help="AWS-compatible endpoint for the SageMaker and S3 calls (e.g. http://127.0.0.1:5000)")
    p.add_argument("--role", default=None, help="IAM role ARN the job runs as (required unless --dry_run)")
    p.add_argument("--bucket", default=None,
                   help="S3 bucket for code, output, checkpoints, TensorBoard (required unless --dry_run)")
    p.add_argument("--prefix", default="pile-training", help="key prefix inside --bucket")
    p.add_argument("--job_name", default=None, help="default pile-<trainer>-<UTC time>")
    p.add_argument("--instance_type", default="ml.p3.16xlarge")
    p.add_argument("--instance_count", type=int, default=10)
    p.add_argument("--processes_per_host", type=int, default=8, help="one per GPU")
    p.add_argument("--framework_version", default=None, help="SageMaker TensorFlow image (per-trainer default)")
    p.add_argument("--py_version", default=None)
    p.add_argument("--image_uri", default=None, help="a custom training image instead of SageMaker's")
    p.add_argument("--volume_size", type=int, default=100, help="GB of EBS per instance")
    p.add_argument("--max_run_hours", type=float, default=120.0)
    p.add_argument("--spot", action="store_true", help="managed spot training (resumes from checkpoints)")
    # data
    p.add_argument("--data", choices=("efs", "s3"), default="efs")
    p.add_argument("--efs_id", default=None, help="EFS file system id (fs-...)")
    p.add_argument("--efs_train_dir", default="/pile/tokens/train", help="pipeline output for --split train")
    p.add_argument("--efs_val_dir", default="/pile/tokens/val", help="pipeline output for --split val ('' for none)")
    p.add_argument("--subnets", default=None, help="comma list; required for EFS input")
    p.add_argument("--security_group_ids", default=None, help="comma list; required for EFS input")
    p.add_argument("--s3_train", default=None, help="s3:// pipeline output (with --data s3)")
    p.add_argument("--s3_val", default=None)
    p.add_argument("--s3_input_mode", choices=("FastFile", "File"), default="FastFile")
    # model parallelism
    p.add_argument("--partitions", type=int, default=2, help="smp: model partitions")
    p.add_argument("--microbatches", type=int, default=4, help="smp: microbatches per step")
    p.add_argument("--pipeline", choices=("interleaved", "simple"), default="interleaved")
    p.add_argument("--placement_strategy", choices=("spread", "cluster"), default="spread")
    # trainer
    p.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE",
                   help="trainer flag, e.g. --hp model=xl --hp max_steps=20000 (repeatable)")
    p.add_argument("--profiler_interval_ms", type=int, default=500,
                   help="SageMaker Debugger system-metrics interval (0: no profiler)")
    p.add_argument("--output_json", default=None, help="also write the request (and response) here")
    return p


# -- source bundle ------------------------------------------------------------------------------


def package_source() -> bytes:
    """sourcedir.tar.gz with the trainers, the reader and requirements.txt (deterministic bytes)."""
    files: list[tuple[str, bytes]] = []
    for rel in SOURCE_FILES:
        files.append((rel, (REPO / rel).read_bytes()))
    for d in SOURCE_DIRS:
        for path in sorted((REPO / d).rglob("*.py")):
            if path.relative_to(REPO).as_posix() == LAUNCHER:
                continue
            files.append((path.relative_to(REPO).as_posix(), path.read_bytes()))
    files.append(("requirements.txt", REQUIREMENTS.encode()))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    import gzip

    return gzip.compress(raw.getvalue(), mtime=0)


# -- the SDK objects ----------------------------------------------------------------------------


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def hyperparameters(args) -> dict[str, str]:
    """The trainer's flags from --hp KEY=VALUE (plus --backend for the data-parallel trainer)."""
    hps: dict[str, str] = {}
    for item in args.hp:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--hp {item!r}: expected KEY=VALUE (a trainer flag without its dashes)")
        hps[key.lstrip("-")] = value
    if args.trainer in ("horovod", "smddp"):
        hps.setdefault("backend", args.trainer)
    return hps


def distribution(args) -> dict:
    """The estimator's `distribution`: MPI (Horovod), smdistributed data or model parallelism."""
    if args.trainer == "horovod":
        return {"mpi": {"enabled": True, "processes_per_host": args.processes_per_host,
                        "custom_mpi_options": "-x NCCL_DEBUG=WARN -x HOROVOD_CYCLE_TIME=1"}}
    if args.trainer == "smddp":
        return {"smdistributed": {"dataparallel": {"enabled": True}}}
    if args.processes_per_host % args.partitions:
        raise SystemExit(f"--processes_per_host {args.processes_per_host} is not a multiple of "
                         f"--partitions {args.partitions}")
    replicas = args.instance_count * args.processes_per_host // args.partitions
    return {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {
            "partitions": args.partitions,
            "microbatches": args.microbatches,
            "pipeline": args.pipeline,
            "optimize": "speed",
            "placement_strategy": args.placement_strategy,
            "horovod": replicas > 1,  # data parallelism across model replicas
        }}},
        "mpi": {"enabled": True, "processes_per_host": args.processes_per_host,
                "custom_mpi_options": "--mca btl_vader_single_copy_mechanism none"},
    }


def inputs(args) -> dict:
    """The train (and val) channels: EFS file-system input or S3."""
    from sagemaker.inputs import FileSystemInput, TrainingInput

    if args.data == "efs":
        missing = [n for n in ("efs_id", "subnets", "security_group_ids") if not getattr(args, n)]
        if missing:
            raise SystemExit(f"--data efs needs {', '.join('--' + m for m in missing)} (the job's VPC "
                             "must reach the file system's mount targets)")
        channels = {"train": args.efs_train_dir, "val": args.efs_val_dir}
        return {name: FileSystemInput(file_system_id=args.efs_id, file_system_type="EFS",
                                      directory_path=path, file_system_access_mode="ro")
                for name, path in channels.items() if path}
    if not args.s3_train:
        raise SystemExit("--data s3 needs --s3_train s3://... (the pipeline's output directory)")
    channels = {"train": args.s3_train, "val": args.s3_val}
    return {name: TrainingInput(uri.rstrip("/") + "/", distribution="FullyReplicated",
                                input_mode=args.s3_input_mode)
            for name, uri in channels.items() if uri}


def make_session(args, capture: dict):
    """boto3 + SageMaker sessions; CreateTrainingJob's parameters are copied into `capture`."""
    import boto3
    import sagemaker
    from botocore.awsrequest import AWSResponse

    if args.dry_run:
        boto = boto3.Session(aws_access_key_id="dry-run", aws_secret_access_key="dry-run",
                             region_name=args.region)
    else:
        boto = boto3.Session(region_name=args.region)
    client = boto.client("sagemaker", endpoint_url=args.endpoint_url)

    def keep_params(params, **_):
        capture["request"] = copy.deepcopy(params)

    client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob", keep_params)
    if args.dry_run:
        def fake_create(params, model, **_):
            # Reached only after botocore validated the request against the SageMaker API model.
            name = capture["request"]["TrainingJobName"]
            arn = f"arn:aws:sagemaker:{args.region}:111122223333:training-job/{name}"
            http = AWSResponse(url="dry-run://sagemaker", status_code=200, headers={}, raw=None)
            return http, {"TrainingJobArn": arn, "ResponseMetadata": {"HTTPStatusCode": 200}}

        def refuse(request, **_):
            raise DryRunViolation(f"--dry_run: refusing to send {request.method} {request.url}")

        client.meta.events.register("before-call.sagemaker.CreateTrainingJob", fake_create)
        client.meta.events.register("before-send", refuse)
        boto.events.register("before-send", refuse)
        capture["restore_http"] = _refuse_plain_http()
    session = sagemaker.Session(boto_session=boto, sagemaker_client=client, sagemaker_config=_sdk_config(),
                                default_bucket=args.bucket or DRY_RUN_ACCOUNT_BUCKET)
    return boto, session


def _sdk_config() -> dict:
    """No SDK defaults from ~/.config/sagemaker or /etc/xdg/sagemaker, and no telemetry.

    The SDK's telemetry calls STS and sends an HTTPS GET per fit(). Its documented switch is
    `TelemetryOptOut` in the SDK config, but a non-empty config is re-validated against its JSON
    schema on every lookup (slow, and paid on every job), so the emitter is replaced when it exists and
    the config stays empty; otherwise the documented switch is used.
    """
    try:
        from sagemaker.telemetry import telemetry_logging
    except ImportError:
        telemetry_logging = None
    if telemetry_logging is not None and hasattr(telemetry_logging, "_send_telemetry_request"):
        telemetry_logging._send_telemetry_request = lambda *args, **kwargs: None
        return {}
    return {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


def _refuse_plain_http():
    """--dry_run: the SDK also talks HTTP through `requests` (telemetry); refuse that too.

    Returns the function that puts `requests` back.
    """
    import requests

    original = requests.Session.send

    def send(self, request, **kwargs):
        raise DryRunViolation(f"--dry_run: refusing to send {request.method} {request.url}")

    requests.Session.send = send

    def restore() -> None:
        requests.Session.send = original

    return restore


def build_estimator(args, session, source_uri: str, job_name: str):
    """The SDK's TensorFlow estimator for the job."""
    from sagemaker.debugger import ProfilerConfig, TensorBoardOutputConfig
    from sagemaker.tensorflow import TensorFlow

    spec = TRAINERS[args.trainer]
    base = f"s3://{args.bucket or DRY_RUN_ACCOUNT_BUCKET}/{args.prefix}"
    kwargs = {}
    if args.data == "efs":
        kwargs.update(subnets=_split(args.subnets), security_group_ids=_split(args.security_group_ids))
    if args.spot:
        kwargs.update(use_spot_instances=True, max_wait=int(args.max_run_hours * 3600) + 3600)
    if args.image_uri:
        kwargs["image_uri"] = args.image_uri
    else:
        kwargs.update(framework_version=args.framework_version or spec["framework_version"],
                      py_version=args.py_version or spec["py_version"])
    profiler = (ProfilerConfig(system_monitor_interval_millis=args.profiler_interval_ms)
                if args.profiler_interval_ms else None)
    return TensorFlow(
        entry_point=spec["entry_point"],
        source_dir=source_uri,
        role=args.role or DRY_RUN_ROLE,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        distribution=distribution(args),
        hyperparameters=hyperparameters(args),
        output_path=f"{base}/output",
        code_location=f"{base}/code",
        checkpoint_s3_uri=f"{base}/checkpoints/{job_name}",
        checkpoint_local_path="/opt/ml/checkpoints",
        tensorboard_output_config=TensorBoardOutputConfig(
            s3_output_path=f"{base}/tensorboard/{job_name}",
            container_local_output_path="/opt/ml/output/tensorboard",
        ),
        profiler_config=profiler,
        disable_profiler=profiler is None,
        debugger_hook_config=False,  # tensors are not collected; the system profiler is enough
        volume_size=args.volume_size,
        max_run=int(args.max_run_hours * 3600),
        environment={"TF_CPP_MIN_LOG_LEVEL": "1"},
        model_dir=False,  # the trainers take --output_dir / $SM_MODEL_DIR, not the TF estimator's --model_dir
        sagemaker_session=session,
        **kwargs,
    )


def launch(argv=None) -> dict:
    """Build (and unless --dry_run, submit) the training job; returns {"request", "response", ...}."""
    args = build_parser().parse_args(argv)
    if not args.dry_run and not (args.role and args.bucket):
        raise SystemExit("--role and --bucket are required to submit (or use --dry_run)")
    job_name = args.job_name or f"pile-{args.trainer}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
    capture: dict = {}
    out = sys.stdout
    saved_env = {k: os.environ.get(k) for k in ("AWS_EC2_METADATA_DISABLED",)}
    if args.dry_run:
        # Importing the SDK builds a default boto3 session, whose credential lookup would query the
        # EC2 instance metadata service; a dry run needs no credentials.
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the SDK prints on stdout; keep it for the JSON
            boto, session = make_session(args, capture)
            result = _launch(args, job_name, capture, boto, session)
    finally:
        capture.get("restore_http", lambda: None)()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    text = json.dumps(result, indent=1, sort_keys=True, default=str)
    print(text, file=out)
    if args.output_json:
        Path(args.output_json).write_text(text + "\n")
    return result


def _launch(args, job_name: str, capture: dict, boto, session) -> dict:
    bundle = package_source()
    key = f"{args.prefix}/code/{job_name}/source/sourcedir.tar.gz"
    bucket = args.bucket or DRY_RUN_ACCOUNT_BUCKET
    source_uri = f"s3://{bucket}/{key}"
    if args.dry_run:
        log.info("dry run: would upload %d bytes to %s", len(bundle), source_uri)
    else:
        boto.client("s3", endpoint_url=args.endpoint_url).put_object(Bucket=bucket, Key=key, Body=bundle)
        log.info("uploaded %s (%d bytes)", source_uri, len(bundle))
    estimator = build_estimator(args, session, source_uri, job_name)
    estimator.fit(inputs=inputs(args), job_name=job_name, wait=False, logs=False)
    request = capture.get("request")
    if request is None:
        raise RuntimeError("the SDK did not call CreateTrainingJob")
    result = {"dry_run": args.dry_run, "source_bundle": {"uri": source_uri, "bytes": len(bundle)},
              "request": request, "training_job_name": job_name}
    if not args.dry_run:
        result["response"] = session.sagemaker_client.describe_training_job(TrainingJobName=job_name)
    return result


def main() -> None:
    """`python -m trainers.launch_sagemaker`: log to stderr, the JSON result to stdout."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    launch()


if __name__ == "__main__":
    main()
