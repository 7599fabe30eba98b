"""The one way in to a command's start-up tricks: what a process that runs one command may do to start faster.

Each trick saves tenths of a second of a command on one machine and changes no byte of its output;
none is part of the job's graph, and only the early check's result reaches `run_job`:

- gc_policy: the cyclic garbage collector paused while Beam is imported and the graph is built;
- malloc_policy: glibc's malloc keeping freed memory for the next batch;
- lean_import: Beam imported without the cloud connectors a DirectRunner job never uses;
- native_stderr: TensorFlow's start-up notices kept off a command's output (`show`);
- early_check: the tokenizer's self-check started in a forked process before Beam is imported
  (pipeline/cli/run.py starts it; the one trick the job sees, as `run_job(early=...)`, whose result
  the driver takes only for exactly what it settled on).

They apply only in a process an entry point marked with `one_command_per_process()` (the console
script, `python -m pipeline.run`): a program or test that calls `pipeline.cli.run.main` itself keeps
Python's and glibc's defaults and imports Beam whole.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from pipeline.startup import gc_policy, lean_import, malloc_policy

_ONE_COMMAND = [False]


def one_command_per_process() -> None:
    """Say that this process runs one command, then exits (the command-line entry points)."""
    _ONE_COMMAND[0] = True


@contextlib.contextmanager
def tuned_job(lean_beam: bool) -> Iterator[None]:
    """Around a `run` command's job: the process's tricks (in a one-command process), Beam imported for the job.

    `lean_beam`: the job's runner never uses Beam's cloud connectors in this process (its profile's row says so).
    """
    one = _ONE_COMMAND[0]
    if one:
        gc_policy.pause()  # until the job's graph is built (`graph_built`)
        malloc_policy.keep_freed_memory()
    try:
        lean_import.import_beam(lean=one and lean_beam)
        yield
    finally:
        gc_policy.resume()


def graph_built() -> None:
    """The job's graph exists: what exists now is kept out of collection, the job's own objects collected as usual."""
    gc_policy.resume()


def exiting() -> None:
    """The process is about to exit: the objects alive now are left out of the interpreter's last collection.

    The interpreter's shutdown collects garbage over every object again; after a Beam job (thousands
    of modules loaded) that walk is a noticeable part of a short command. Only for the last step of a process.
    """
    gc.freeze()
