"""Each worker process of a Dask job made ready once, when the job starts, not by its tasks.

Beam's DaskRunner runs every task in a worker process that knows nothing of the job until the
first task arrives: the task imports Beam and our modules as it unpickles, and runs in Dask's
settings for a process whose memory comes and goes, not a worker that allocates and frees the same
large buffers (a batch's texts and ids, a chunk's records) over and over. Dask's nanny starts every
worker with glibc's trim threshold at 64 KB (`distributed.nanny.pre-spawn-environ`), so every
freed buffer goes back to the kernel and the next one is faulted in and zeroed again: a fifth of
the workers' CPU on our job (docs/benchmarks.md). `WarmUp` (a Dask worker plugin, registered by
the job for its length) instead, in each worker process, once:

- keeps freed memory for reuse (pipeline/startup/malloc_policy.py), Dask's settings given back when
  the job ends (the plugin's teardown);
- imports the job's modules (Beam's and the tokenizer engine's with them), while the driver still
  builds the graph, the cyclic garbage collector paused meanwhile (it would walk the objects being
  made, again and again, to free nothing: pipeline/startup/gc_policy.py) and kept from walking them
  after (`gc.freeze`: they live as long as the process);
- takes what the driver derived from the tokenizer for its self-check (a model's converted form, the
  cuts that keep the ids: pipeline/tokenize/encoder.py `derived`) instead of deriving it again.

On Beam's local cluster (no --dask_client_address) the workers are started by the job itself: the
same runs in each as a preload (`dask_setup`), through the Dask configuration they inherit. The
scheduler unpickles the job's graph, so it imports the same modules: `WarmScheduler` does that
the same way.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
from collections.abc import Iterator

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from pipeline.startup import malloc_policy
from pipeline.tokenize import encoder
from pipeline.tokenize.engines import FAST_BACKENDS, import_backend

LOG = logging.getLogger("pipeline")
NAME = "pile-pipeline-warm-up"
MODULES = ("pipeline.beam.job",)  # the job's graph: every DoFn's module, and Beam
# The trim threshold distributed's own configuration (distributed.yaml) puts in every worker's environment.
DASK_TRIM = {"MALLOC_TRIM_THRESHOLD_": "65536"}


def imported(modules: tuple[str, ...], backend: str | None = None) -> None:
    """Import `modules` (and `backend`'s), the cyclic collector paused meanwhile; then keep them out of its walks."""
    paused = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
        if backend in FAST_BACKENDS:
            import_backend(backend)
    finally:
        gc.freeze()
        if paused:
            gc.enable()


def warm(modules: tuple[str, ...] = MODULES, backend: str | None = None, derived: dict | None = None) -> bool:
    """Make this worker process ready for the job; whether its malloc now keeps freed memory.

    `backend`: the job's tokenizer engine; `derived`: what the driver derived from the tokenizer.
    """
    kept = malloc_policy.keep_freed_memory(ignore=DASK_TRIM)
    imported(modules, backend)
    if derived:
        encoder.adopt(derived)
    return kept


class WarmUp(WorkerPlugin):
    """The job's readiness in every worker of the cluster, present and future, for as long as it is registered."""

    name = NAME

    def __init__(self, modules: tuple[str, ...] = MODULES, backend: str | None = None, derived: dict | None = None):
        self.modules, self.backend, self.derived = modules, backend, derived
        self.kept = False

    def setup(self, worker) -> None:
        """Once per worker process, as the plugin reaches it."""
        self.kept = warm(self.modules, self.backend, self.derived)

    def teardown(self, worker) -> None:
        """When the job ends: Dask's malloc settings back (the imports stay: a worker keeps its modules)."""
        if self.kept:
            malloc_policy.restore(int(DASK_TRIM["MALLOC_TRIM_THRESHOLD_"]))


class WarmScheduler(SchedulerPlugin):
    """The job's modules imported in the scheduler before it unpickles the job's graph."""

    name = f"{NAME}-scheduler"

    def __init__(self, modules: tuple[str, ...] = MODULES):
        self.modules = modules

    def start(self, scheduler) -> None:
        """As the plugin is added (before the job's graph arrives)."""
        imported(self.modules)


def dask_setup(worker) -> None:
    """Dask's preload hook: a worker of Beam's local cluster, started for this job alone."""
    warm()


@contextlib.contextmanager
def warmed(address: str | None, backend: str | None = None, timeout: int | None = None) -> Iterator[None]:
    """For the length of the job: the plugin on the cluster at `address`, or the preload for a local one.

    `backend`: the job's tokenizer engine; what this process derived from the tokenizer goes with the plugin.
    `timeout`: seconds to connect (--dask_connection_timeout, as Beam's client takes it); None: Dask's default.
    """
    import dask

    if address is None:
        preload = [*dask.config.get("distributed.worker.preload", []), __name__]
        with dask.config.set({"distributed.worker.preload": preload}):
            yield
        return
    from distributed import Client

    with Client(address, set_as_default=False, **({} if timeout is None else {"timeout": timeout})) as client:
        try:
            client.register_plugin(WarmScheduler(), name=WarmScheduler.name)
        except Exception:  # noqa: BLE001 -- only a saving: the scheduler imports the modules as it unpickles the graph
            LOG.debug("the scheduler's warm-up plugin was not registered", exc_info=True)
        client.register_plugin(WarmUp(backend=backend, derived=encoder.derived()), name=NAME)
        try:
            yield
        finally:
            # A client that lost its scheduler is reconnecting: a scheduler that went away takes the
            # plugins with it, and waiting for the reconnection to time out would only delay the job's one line.
            if client.status == "running":
                _unregister(client)


def _unregister(client) -> None:
    """Both plugins off the cluster (the workers' teardown gives Dask's malloc settings back)."""
    try:
        client.unregister_worker_plugin(NAME)
        client.unregister_scheduler_plugin(WarmScheduler.name)
    except Exception:  # noqa: BLE001 -- a scheduler that went away takes the plugins with it
        LOG.debug("the Dask warm-up plugins could not be unregistered", exc_info=True)
