"""The runner profile: what the job needs to know of a runner family, behind one small interface.

`run_job` (pipeline/beam/launch.py) picks a job's profile once, from --runner
(pipeline/beam/runners/registry.py), and asks it, in this order:

1. `declare_options`, `normalize`, `check`: its Beam flags known to the flag check; our defaults
   on them; what is wrong with them refused before anything starts, one line naming the flag.
2. `warm_up`: what the driver may start while the tokenizer's self-check runs (what its workers
   need once per process, not per task, goes with its `workspace`: Dask's warm.py).
3. `workers`: where the workers run (which paths they can read, pipeline/beam/remote.py).
4. `plan`: how the work spreads (pipeline/beam/execution.py `Execution`), once, in the driver.
5. `workspace`: around the run, what its workers are handed (`Workspace`): the record sink
   (pipeline/io/sinks.py), the work-item reader when workers read their own (None: chunks fanned
   out), progress, and `runtime`: what the graph may ask of it (pipeline/beam/graph.py `Runtime`).
6. `runner_object`: the runner Beam runs the pipeline on (None: Beam's, made from the name).
7. `finish`: after the run, however it ended; `failure`: a failure of the runner itself as one line.

The job's graph is the same on every runner; a profile changes where bytes wait, who reads what and
which of the graph's two shapes a step takes (`runtime`), never a byte of the output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.execution import Execution, Workspace
from pipeline.beam.graph import EVERY_FEATURE, Runtime
from pipeline.beam.remote import Workers
from pipeline.io.sinks import KEEP


class RunnerProfile:
    """One runner family (its defaults are a distributed runner's: chunks fanned out, record blocks kept).

    family: the registry's name of it; name: the --runner name Beam is given; runtime: what the
    graph may ask of it; reruns_tasks: a task may run again (a retried bundle, a lost worker), so
    the temporary files of a writer stopped midway are removed once the job ends.
    """

    family = ""
    name = ""
    runtime: Runtime = EVERY_FEATURE
    reruns_tasks = True

    def declare_options(self) -> None:
        """Make its flags known to Beam's options (a UsageError when its packages are missing)."""

    def normalize(self, options: PipelineOptions, beam_args: list[str]) -> None:
        """Set `options` to this runner's name and our defaults for the flags `beam_args` leaves unset."""

    def check(self, options: PipelineOptions) -> None:
        """Refuse (UsageError, one line naming the flag) what would fail once the job has started; no network."""

    def warm_up(self, config, options: PipelineOptions, beam_args: list[str]) -> None:
        """Start, in the background, what the workers will need and the driver can prepare while it checks."""

    def workers(self, options: PipelineOptions) -> Workers:
        """Where the workers run (pipeline/beam/remote.py)."""
        raise NotImplementedError

    def plan(self, options: PipelineOptions, input_files: list[str], fan_out: str = "auto",
             encode_threads: int | None = None, input_bytes: int = 0) -> Execution:
        """How the job spreads over the workers (logged); `input_bytes`: the inputs' stored size."""
        raise NotImplementedError

    @contextlib.contextmanager
    def workspace(self, job, options: PipelineOptions, beam_args: list[str], progress: tuple | None = None,
                  translate_only: bool = False) -> Iterator[Workspace]:
        """What a run's workers are handed, made once the run holds the output directory; undone after."""
        yield Workspace(KEEP, progress, self.runtime, None)

    def runner_object(self, options: PipelineOptions):
        """The runner to run the pipeline on; None: Beam's own, from --runner."""
        return None

    def finish(self, result, options: PipelineOptions) -> None:
        """After the pipeline's `with` block, however it ended (`result`: its PipelineResult, or None)."""

    def failure(self, exc: BaseException, options: PipelineOptions) -> str | None:
        """The one line for a failure of the runner itself (not of the job's code); None for others."""
        return None
