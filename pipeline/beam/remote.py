"""Whether the job's workers can read the paths the command line names; where the workers run.

On a distributed runner the workers are other machines (Dataflow's VMs, a Flink or Spark cluster)
or containers: a path on this machine's disk names nothing there, and the job would fail on every
worker after start-up, or worse, write its output onto a worker's local disk. So before anything
starts, a local `--input`, `--tokenizer_model` or `--output_dir` is refused on such a runner, unless
the workers run on cluster hosts that mount the same network filesystem (EFS/NFS, Lustre, ...:
Flink or Spark with an EXTERNAL or PROCESS environment, see beam_configs/flink.toml) and the path
lies on one.

Where the workers run is each runner profile's answer (pipeline/beam/runners/, `workers`: a
`Workers`); the paths' checks, a path's filesystem and whether a host is this machine are shared
by every runner and live here.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.runners.registry import profile_for
from pipeline.core.options import UsageError

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


def workers_of(options: PipelineOptions) -> Workers:
    """Where the workers of a job with these options run (its runner profile's answer)."""
    return profile_for(options).workers(options)


def on_this_machine(host: str) -> bool:
    """Whether `host` (a name or an IP address) is this machine: a loopback address, or one of its own."""
    if host in ("localhost", ""):
        return True
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return True
    except ValueError:
        pass  # a name, not an address
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

