"""`python -m pipeline.run ...`: the pipeline's stable entry point (the command is pipeline/cli/run.py)."""

import sys

from pipeline.beam.lean_import import one_command_per_process
from pipeline.cli.main import exiting
from pipeline.cli.run import cli, main

__all__ = ["main"]

if __name__ == "__main__":
    one_command_per_process()
    sys.exit(exiting(cli()))
