"""`python -m pipeline.run ...`: the pipeline's stable entry point (the command is pipeline/cli/run.py)."""

import sys

from pipeline.cli.main import exiting
from pipeline.core.extras import guarded
from pipeline.startup.command import one_command_per_process

__all__ = ["main"]


def main(argv: list[str] | None = None) -> dict | None:
    """`pile-pipeline run`: the manifest written (pipeline/cli/run.py `main`)."""
    from pipeline.cli.run import main as run_main  # after the guard, so that a missing package is one line

    return run_main(argv)


def _cli(argv: list[str] | None) -> int:
    from pipeline.cli.run import cli

    return cli(argv)


if __name__ == "__main__":
    one_command_per_process()
    sys.exit(exiting(guarded(_cli, None, "pile-pipeline run")))
