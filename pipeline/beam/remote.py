"""Where the job's workers run, and whether they can read the paths the command line names.

On a distributed runner the workers are other machines (Dataflow's VMs, a Flink or Spark cluster)
or containers: a path on this machine's disk names nothing there, and the job would fail on every
worker after start-up, or worse, write its output onto a worker's local disk. So before anything
starts, a local `--input`, `--tokenizer_model` or `--output_dir` is refused on such a runner, unless
the workers run on cluster hosts that mount the same network filesystem (EFS/NFS, Lustre, ...:
Flink or Spark with an EXTERNAL or PROCESS environment, see beam_configs/flink.toml) and the path
lies on one.

Workers see this machine's files on DirectRunner and Prism, in a LOOPBACK environment (the workers
are threads of this process), and with a local Flink or Spark master or an embedded job server
unless the workers run in Docker (Beam mounts no host directory into them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import urllib.parse

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from pipeline.beam.options import import_dask_options
from pipeline.core.options import UsageError

LOCAL_RUNNERS = ("direct", "prism", "interactive", "switching")
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "efs", "lustre", "cifs", "smb3", "smbfs", "glusterfs", "ceph", "beegfs", "gpfs",
    "fuse.glusterfs", "fuse.ceph", "fuse.s3fs", "fuse.goofys", "fuse.gcsfuse", "fuse.mountpoint-s3",
    "fuse.juicefs", "fuse.sshfs",
})


@dataclasses.dataclass(frozen=True)
class Workers:
    """Where a job's workers run.

    local: they read this machine's files; shared_mounts: (when not local) they run on cluster hosts,
    so a network filesystem mounted here is mounted there too; where: a phrase for messages.
    """

    local: bool
    shared_mounts: bool = False
    where: str = ""


def _runner_name(runner: str | None) -> str:
    name = (runner or "DirectRunner").rsplit(".", 1)[-1].lower()
    return name[: -len("runner")] if name.endswith("runner") else name


def workers_of(options: PipelineOptions) -> Workers:
    """Where the workers of a job with these options run (see the module docstring)."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    name = _runner_name(runner)
    portable = options.view_as(PortableOptions)
    environment = (portable.environment_type or "").upper()
    if name in LOCAL_RUNNERS or environment == "LOOPBACK":
        return Workers(True)
    if name == "dask":
        return dask_workers(options)
    if name == "dataflow":
        return Workers(False, where="DataflowRunner's workers are Google Cloud VMs")
    hosts = environment in ("EXTERNAL", "PROCESS")  # workers on the cluster's hosts, not in containers
    if portable.output_executable_path:
        return Workers(False, hosts, f"{runner} runs the jar {portable.output_executable_path} on a cluster")
    if name == "flink":
        master = options.view_as(FlinkRunnerOptions).flink_master
        if master in ("[local]", "[auto]"):
            return Workers(environment != "DOCKER", where="the workers run in Docker containers")
        return Workers(False, hosts, f"FlinkRunner's workers run on the cluster at {master}")
    if name == "spark":
        master = options.view_as(SparkRunnerOptions).spark_master_url or ""
        if master == "local" or master.startswith("local["):
            return Workers(environment != "DOCKER", where="the workers run in Docker containers")
        return Workers(False, hosts, f"SparkRunner's workers run on the cluster at {master}")
    if name == "portable":
        endpoint = portable.job_endpoint
        if endpoint in (None, "embed") and environment in ("EXTERNAL", "PROCESS"):
            return Workers(True)
        if endpoint in (None, "embed"):
            return Workers(False, where="the workers run in Docker containers")
        return Workers(False, hosts, f"the job server at {endpoint} runs the workers elsewhere")
    return Workers(False, hosts, f"{runner}'s workers run elsewhere")


def dask_workers(options: PipelineOptions) -> Workers:
    """DaskRunner's workers: a cluster of this machine's processes, or a scheduler's workers on other hosts.

    Without --dask_client_address (or --dask_scheduler_file) Beam starts a local cluster of worker
    processes, which read this machine's files. A scheduler on this machine (loopback or one of its
    own addresses) is taken as a cluster on it; one on another host has workers there, which see a
    network filesystem mounted here only if it is mounted on their hosts too.
    """
    import_dask_options()
    from apache_beam.runners.dask.dask_runner import DaskOptions

    dask = options.view_as(DaskOptions)
    address = dask.address
    if not address and dask.scheduler_file:
        address = scheduler_file_address(dask.scheduler_file)
    if not address:
        return Workers(True)
    host = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}").hostname or ""
    if _on_this_machine(host):
        return Workers(True)
    return Workers(False, True, f"DaskRunner's workers run on the cluster of the scheduler at {address}")


def scheduler_file_address(path: str) -> str | None:
    """The scheduler address a scheduler file names (None if it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            address = json.load(f).get("address")
    except (OSError, ValueError, AttributeError):
        return None  # Beam's client reports it
    return address if isinstance(address, str) else None


def _on_this_machine(host: str) -> bool:
    if host in ("localhost", "") or host.startswith("127.") or host == "::1":
        return True
    try:
        ours = {socket.gethostname(), socket.getfqdn()}
        ours |= {info[4][0] for name in list(ours) for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return host in ours


def is_local_path(path: str) -> bool:
    """A path on this machine (no URL scheme, or file://), as opposed to s3://, gs://, ..."""
    return "://" not in path or path.startswith("file://")


def _existing_ancestor(path: str) -> str:
    path = path.removeprefix("file://")
    for i, char in enumerate(path):
        if char in "*?[":
            path = os.path.dirname(path[:i]) or "."
            break
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.path.realpath(path)


def filesystem_type(path: str, mounts: str | None = None) -> str:
    """The type of the filesystem holding `path` (or its nearest existing parent), from /proc/mounts."""
    if mounts is None:
        try:
            with open("/proc/mounts", encoding="utf-8") as f:
                mounts = f.read()
        except OSError:
            return ""
    target = _existing_ancestor(path)
    best, kind = "", ""
    for row in mounts.splitlines():
        fields = row.split()
        if len(fields) < 3:
            continue
        point = fields[1].encode().decode("unicode_escape")  # /proc/mounts writes a space as \040
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def paths_workers_cannot_read(workers: Workers, paths: list[tuple[str, str]],
                              mounts: str | None = None) -> list[tuple[str, str]]:
    """The (flag, path) pairs that name this machine's files where the workers cannot read them."""
    if workers.local:
        return []
    bad = []
    for flag, path in paths:
        if not is_local_path(path):
            continue
        if workers.shared_mounts and filesystem_type(path, mounts) in NETWORK_FILESYSTEMS:
            continue
        bad.append((flag, path))
    return bad


def check_workers_can_read(options: PipelineOptions, paths: list[tuple[str, str]], mounts: str | None = None) -> None:
    """Raise UsageError (one line) when a local path is named for workers that cannot read it."""
    workers = workers_of(options)
    bad = paths_workers_cannot_read(workers, paths, mounts)
    if not bad:
        return
    named = ", ".join(f"{flag} {path}" for flag, path in bad)
    shared = " or a network filesystem mounted on every worker host (EFS, NFS)" if workers.shared_mounts else ""
    raise UsageError(
        f"{named}: {'a local path' if len(bad) == 1 else 'local paths'}, but {workers.where} and cannot read "
        f"this machine's files; use s3:// or gs:// URLs{shared}"
    )

