"""The Dask cluster around a run: its flags checked, its scheduler asked and let go, its failures in one line.

Beam's runner (apache_beam.runners.dask) connects a `distributed.Client` to --dask_client_address
(or --dask_scheduler_file; neither: a local cluster of worker processes it starts) and hands the
job's graph over as one computation. Here: the flags checked before anything starts (`check_flags`,
`cluster_threads`: what the client would fail on inside the job, as one line naming the flag); the
tasks the reading is cut into (`dask_tasks`: one per thread of the cluster); the client closed once
the job ends (and the local cluster stopped); and the ways a computation ends without an error of
ours turned into one line (`failure`): a computation the scheduler dropped (it went away, or it was
restarted) ends *cancelled*, which Beam's runner reports as success.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import urllib.parse

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.core.extras import install_line
from pipeline.core.options import UsageError

LOG = logging.getLogger("pipeline")
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")  # distributed's comm backends


def import_dask_options() -> None:
    """Declare DaskRunner's flags (--dask_client_address, ...): a UsageError when dask is not installed."""
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401  (registers DaskOptions)
        import dask.distributed  # noqa: F401
    except ImportError as e:
        raise UsageError(f"--runner DaskRunner needs dask and distributed ({e.name} is not installed): "
                         f"{install_line('dask')}") from None


def dask_options(options: PipelineOptions):
    """Beam's DaskOptions of these options."""
    import_dask_options()
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return options.view_as(DaskOptions)


def check_flags(options: PipelineOptions) -> None:
    """Refuse what Beam's client would fail on once the job has started (UsageError, one line naming the flag).

    Without a network: the number of tasks, the scheduler's address (a Dask protocol, a host, a
    port that is a number) and the scheduler file (it exists, is JSON and names an address).
    """
    dask = dask_options(options)
    for flag, value in (("--dask_npartitions", dask.npartitions), ("--dask_partition_size", dask.partition_size)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if dask.address:
        check_address("--dask_client_address", dask.address)
    elif dask.scheduler_file:
        check_address(f"--dask_scheduler_file {dask.scheduler_file}: its address", read_scheduler_file(
            dask.scheduler_file))


def check_address(flag: str, address: str) -> None:
    """Refuse (UsageError naming `flag`) a scheduler address Dask cannot connect to, whatever answers there."""
    parts = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in SCHEMES:
        raise UsageError(f"{flag} {address}: {parts.scheme}:// is not one of Dask's protocols "
                         f"({', '.join(s + '://' for s in SCHEMES)})")
    try:
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number, or past 65535
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        raise UsageError(f"{flag} {address}: the port {port!r} is not a port number") from None
    if not parts.hostname:
        raise UsageError(f"{flag} {address}: no host (tcp://HOST:PORT)")


def read_scheduler_file(path: str) -> str:
    """The scheduler address a scheduler file names (what dask-jobqueue, dask-mpi, `dask scheduler` write).

    Raises:
        UsageError: the file cannot be read, is not JSON, or names no address.
    """
    try:
        with open(path, encoding="utf-8") as f:
            address = json.load(f).get("address")
    except OSError as e:
        raise UsageError(f"--dask_scheduler_file {path}: {e.strerror or e}") from None
    except (ValueError, AttributeError):
        raise UsageError(f"--dask_scheduler_file {path}: not a Dask scheduler file (JSON naming the scheduler's "
                         '"address", as `dask scheduler --scheduler-file` writes it)') from None
    if not isinstance(address, str) or not address:
        raise UsageError(f'--dask_scheduler_file {path}: names no scheduler "address"')
    return address


def scheduler_address(options: PipelineOptions) -> str | None:
    """The scheduler's address from --dask_client_address or --dask_scheduler_file; None: a local cluster."""
    dask = dask_options(options)
    return dask.address or (read_scheduler_file(dask.scheduler_file) if dask.scheduler_file else None)


def connection_timeout(options: PipelineOptions) -> int | None:
    """--dask_connection_timeout in seconds; None when not given (Beam's client then takes Dask's default)."""
    timeout = dask_options(options).timeout
    return timeout if isinstance(timeout, int) else None


async def _identity(address: str, timeout: float) -> dict:
    """What answers at `address` says it is (a scheduler: its type, workers and their threads)."""
    from distributed.core import rpc
    from distributed.security import Security

    # The client's TLS settings from Dask's configuration, as Beam's client takes them.
    async with rpc(address, timeout=timeout, connection_args=Security().get_connection_args("client")) as peer:
        return await asyncio.wait_for(peer.identity(), timeout)


def cluster_threads(options: PipelineOptions) -> int | None:
    """The threads of a running scheduler's workers, asked of it; None for a local cluster (not started yet).

    Asked before anything starts, so that a scheduler that does not answer, or something else that
    answers at its address (a worker, a web server), is one line naming the flag (UsageError), not a
    traceback from inside the job or a client that waits for ever.
    """
    address = scheduler_address(options)
    if not address:
        return None
    dask = dask_options(options)
    flag = f"--dask_client_address {address}" if dask.address else f"--dask_scheduler_file {dask.scheduler_file}"
    timeout = 30 if (given := connection_timeout(options)) is None else given
    quiet = logging.getLogger("distributed")
    level, quiet.level = quiet.level, logging.CRITICAL + 1  # its own reports of what is reported here
    try:
        info = asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout + 5))
    except TypeError as e:
        if "ssl_context" not in str(e):
            raise UsageError(f"{flag}: what answers at {address} is not a Dask scheduler ({e})") from None
        raise UsageError(f"{flag}: a tls:// scheduler, but Dask's TLS settings are not set (distributed.comm.tls "
                         "ca-file, client.cert and client.key in Dask's configuration)") from None
    except (OSError, TimeoutError, asyncio.TimeoutError) as e:
        raise UsageError(f"{flag}: no Dask scheduler answers at {address} ({e or type(e).__name__})") from None
    except Exception as e:  # noqa: BLE001 -- whatever a server that is not a scheduler makes the client do
        raise UsageError(f"{flag}: what answers at {address} is not a Dask scheduler ({type(e).__name__})") from None
    finally:
        quiet.level = level
    kind = info.get("type") if isinstance(info, dict) else None
    if kind != "Scheduler":
        raise UsageError(f"{flag}: what answers at {address} is {f'a Dask {kind}' if kind else 'something'}, "
                         "not a Dask scheduler")
    return sum(int(w.get("nthreads", 0)) for w in (info.get("workers") or {}).values())


def dask_tasks(options: PipelineOptions) -> int:
    """How many tasks a DaskRunner job's reading is cut into: --dask_npartitions, else the cluster's threads.

    A running scheduler is always asked (`cluster_threads`); a local cluster has one thread per core in all.
    """
    threads = cluster_threads(options)
    dask = dask_options(options)
    if dask.npartitions:
        return dask.npartitions
    if threads is None:
        return os.cpu_count() or 1
    if not threads:
        LOG.warning("the Dask scheduler at %s has no workers yet: the input is read in one task "
                    "(--dask_npartitions N sets the number of tasks)", scheduler_address(options))
    return max(1, threads)


def quiet_client_logs() -> None:
    """Log lines of distributed (the client, a local cluster) from WARNING up; reconnection tracebacks never."""
    logging.getLogger("distributed").setLevel(logging.WARNING)
    logging.getLogger("distributed.client").setLevel(logging.CRITICAL)


def finish(result, options: PipelineOptions) -> None:
    """After the pipeline's `with` block: close the client (and Beam's local cluster); fail on a dropped computation."""
    client = getattr(result, "client", None)
    if client is None:
        return
    futures = result.futures if isinstance(result.futures, (list, tuple)) else [result.futures]
    status = next((f.status for f in futures if f.status != "finished"), "finished")
    cluster = getattr(client, "cluster", None)
    try:
        client.close()
        if cluster is not None:
            cluster.close()
    except Exception:  # noqa: BLE001 -- a scheduler that went away cannot be closed cleanly
        LOG.debug("closing the Dask client failed", exc_info=True)
    if status != "finished":
        raise DaskFailure(f"the Dask scheduler at {scheduler_address(options) or 'the local cluster'} dropped "
                          f"the job (its computation ended {status}: the scheduler went away or was restarted); "
                          "no manifest was written")


class DaskFailure(Exception):
    """The job stopped because of the Dask cluster, not an error of ours: one line."""


def failure(exc: BaseException, options: PipelineOptions) -> str | None:
    """The one line for a failure of the cluster itself (the scheduler unreachable or gone); None for others."""
    if isinstance(exc, DaskFailure):
        return str(exc)
    from distributed.comm.core import CommClosedError

    lost = (CommClosedError, asyncio.CancelledError, concurrent.futures.CancelledError, TimeoutError)
    seen = exc
    while seen is not None:
        if isinstance(seen, lost):
            where = scheduler_address(options) or "the local cluster"
            return (f"the Dask scheduler at {where} went away ({type(seen).__name__}): the job stopped; no "
                    "manifest was written")
        seen = seen.__cause__ or seen.__context__
    return None

