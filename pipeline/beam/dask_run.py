"""Beam's DaskRunner around a run: how many tasks, the scheduler asked and let go, its failures in one line.

Beam's runner (apache_beam.runners.dask) connects a `distributed.Client` to --dask_client_address
(or --dask_scheduler_file; neither: a local cluster of worker processes it starts) and hands the
job's graph over as one computation. Here: the tasks the reading is cut into (`dask_tasks`: one per
thread of the cluster, asked of the scheduler before anything starts); the client closed once the
job ends (and the local cluster stopped); and the ways a computation ends without an error of ours
turned into one line (`failure`): a computation the scheduler dropped (it went away, or it was
restarted) ends *cancelled*, which Beam's runner reports as success.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.options import import_dask_options
from pipeline.core.options import UsageError
from pipeline.io.sinks import KEEP, RecordSink, StoreSink, remove_folder, store_folder

LOG = logging.getLogger("pipeline")


def _options(options: PipelineOptions):
    import_dask_options()
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return options.view_as(DaskOptions)


def scheduler_address(options: PipelineOptions) -> str | None:
    """The scheduler's address from --dask_client_address or --dask_scheduler_file; None: a local cluster."""
    from pipeline.beam.remote import scheduler_file_address

    dask = _options(options)
    return dask.address or (scheduler_file_address(dask.scheduler_file) if dask.scheduler_file else None)


def dask_tasks(options: PipelineOptions) -> int:
    """How many tasks a DaskRunner job's reading is cut into: --dask_npartitions, else the cluster's threads.

    A running scheduler is asked for its workers' threads (which also checks, before anything
    starts, that it answers); a local cluster has one thread per core in all.
    """
    dask = _options(options)
    if dask.npartitions:
        return dask.npartitions
    address = scheduler_address(options)
    if not address:
        return os.cpu_count() or 1
    from distributed import Client

    timeout = dask.timeout if isinstance(dask.timeout, int) else 30
    try:
        with Client(address, timeout=timeout, set_as_default=False) as client:
            threads = sum(client.nthreads().values())
    except (OSError, TimeoutError) as e:
        flag = "--dask_client_address" if dask.address else "--dask_scheduler_file"
        raise UsageError(f"{flag}: no Dask scheduler answers at {address} ({e})") from None
    if not threads:
        LOG.warning("the Dask scheduler at %s has no workers yet: the input is read in one task "
                    "(--dask_npartitions N sets the number of tasks)", address)
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


@contextlib.contextmanager
def store(job, translate_only: bool = False) -> Iterator[RecordSink]:
    """Dask's side of a run: its record blocks in a hidden folder of the output directory, removed at the end.

    A dask task holds its outputs in memory as one list: record blocks go to files (StoreSink),
    and only references cross Dask.
    """
    quiet_client_logs()
    folder = None if translate_only else store_folder(job.config.output_dir)
    try:
        yield StoreSink(folder) if folder else KEEP
    finally:
        remove_folder(folder)
