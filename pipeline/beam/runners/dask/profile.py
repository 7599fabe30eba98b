"""Beam's DaskRunner on a dask.distributed cluster: what it cannot do, and how the job runs there.

Beam's DaskRunner (apache_beam.runners.dask, Beam 2.77) runs a graph as dask bags; three things
every other runner does are missing there, so its `RUNTIME` says no to each and the graph takes
its other shape (pipeline/beam/graph.py):

- **Tagged outputs.** A ParDo's outputs go into one bag with their tags dropped: a step reading
  `outputs[TAG]` would get every output of the ParDo.
- **Side inputs computed once.** A side input's bag is computed inside every task that reads it,
  again from the start of its branch: a side input that depends on the tokenizing stage would run
  that stage again for each reader.
- **Outputs of `finish_bundle`.** A bundle's outputs are collected before its `finish_bundle` runs
  and what that emits is dropped.

Also: only the last step added to the pipeline is computed (with what it depends on), so every
branch must end in the step that writes the manifest; `beam.Reshuffle` does nothing (a task's
elements stay in the task), so each task reads its own work items (tasks.py); a task's output is
a list in memory, so record blocks go to files (store.py); `beam.Create` puts 128 elements in one
task unless told otherwise (`normalize`: one a task). A task lost with its worker runs again
elsewhere: a writer's temporary files are cleared after the job. The scheduler is asked and let go
in cluster.py; each worker process is made ready for the job once, not by its tasks (warm.py).
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipeline.beam.execution import Execution, Workspace
from pipeline.beam.graph import Runtime
from pipeline.beam.remote import Workers, on_this_machine
from pipeline.beam.runners.base import RunnerProfile
from pipeline.beam.runners.dask import cluster
from pipeline.beam.runners.dask.store import record_store
from pipeline.beam.runners.dask.tasks import Tasks
from pipeline.beam.runners.dask.warm import warmed
from pipeline.config.job import FAN_OUT_CHOICES

LOG = logging.getLogger(__name__)
RUNTIME = Runtime(tagged_outputs=False, side_inputs=False, finish_bundle_outputs=False)


class Dask(RunnerProfile):
    """Beam's DaskRunner (see the module docstring)."""

    family = "dask"
    name = "DaskRunner"
    runtime = RUNTIME

    def declare_options(self) -> None:
        """Beam's DaskOptions (--dask_client_address, ...): a UsageError naming the extra without dask."""
        cluster.import_dask_options()

    def normalize(self, options: PipelineOptions, beam_args: list[str]) -> None:
        """Beam's name for it; a task per element of `beam.Create` unless --dask_npartitions or _partition_size."""
        options.view_as(StandardOptions).runner = self.name
        dask = cluster.dask_options(options)
        if dask.npartitions is None and dask.partition_size is None:
            # A task per work item: Beam's default puts 128 of them in one task, run by one worker.
            dask.partition_size = 1

    def check(self, options: PipelineOptions) -> None:
        """The number of tasks, the scheduler's address, the scheduler file: refused here rather than in the job."""
        cluster.check_flags(options)

    def workers(self, options: PipelineOptions) -> Workers:
        """A cluster of this machine's processes, or a scheduler's workers on other hosts.

        Without --dask_client_address (or --dask_scheduler_file) Beam starts a local cluster of worker
        processes, which read this machine's files. A scheduler on this machine (loopback or one of its
        own addresses) is taken as a cluster on it; one on another host has workers there, which see a
        network filesystem mounted here only if it is mounted on their hosts too.
        """
        address = cluster.scheduler_address(options)
        if not address:
            return Workers(True)
        host = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}").hostname or ""
        if on_this_machine(host):
            return Workers(True)
        return Workers(False, True, f"DaskRunner's workers run on the cluster of the scheduler at {address}")

    def plan(self, options: PipelineOptions, input_files: list[str], fan_out: str = "auto",
             encode_threads: int | None = None, input_bytes: int = 0) -> Execution:
        """One task per thread of the cluster (a running scheduler asked, so checked), each reading its own items."""
        if fan_out not in FAN_OUT_CHOICES:
            raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}, got {fan_out!r}")
        tasks = max(1, cluster.dask_tasks(options) if input_files else 1)
        LOG.info("execution: %d Dask tasks, each reading its work items (whole files or stripes of them)", tasks)
        return Execution(fan_out=False, workers=tasks, share=True, encode_threads=encode_threads or 1,
                         input_bytes=input_bytes)

    @contextlib.contextmanager
    def workspace(self, job, options: PipelineOptions, beam_args: list[str], progress: tuple | None = None,
                  translate_only: bool = False) -> Iterator[Workspace]:
        """Record blocks in the output directory (removed after), tasks that read their own items, warmed workers.

        Each worker process is made ready once for the job (warm.py).
        """
        cluster.quiet_client_logs()
        with record_store(job.config.output_dir, translate_only) as sink, \
                contextlib.nullcontext() if translate_only else warmed(cluster.scheduler_address(options),
                                                                    job.tokenizer.backend.name,
                                                                    cluster.connection_timeout(options)):
            yield Workspace(sink, progress, self.runtime, Tasks())

    def runner_object(self, options: PipelineOptions):
        """Beam's DaskRunner (--runner knows it only by its module path), the graph kept free of side inputs."""
        from pipeline.beam.runners.dask.overrides import DaskRunner

        return DaskRunner()

    def finish(self, result, options: PipelineOptions) -> None:
        """Close the client (and Beam's local cluster); a computation the scheduler dropped fails the job."""
        cluster.finish(result, options)

    def failure(self, exc: BaseException, options: PipelineOptions) -> str | None:
        """The scheduler unreachable, gone or restarted, as one line."""
        return cluster.failure(exc, options)


PROFILE = Dask()
