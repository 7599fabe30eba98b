"""`pile-pipeline COMMAND ...`: one entry point for the commands in pipeline/cli/.

Each command is its own module (they never import each other); this only dispatches, importing the
chosen one alone, so `pile-pipeline show` does not load Beam.
"""

from __future__ import annotations

import importlib
import platform
import sys

from pipeline.core.extras import guarded
from pipeline.core.versions import created_by
from pipeline.io.signals import leave_if_stopped
from pipeline.startup import command

COMMANDS = {
    "run": ("pipeline.cli.run", "JSON-lines files -> token shards + manifest (the Beam job)"),
    "show": ("pipeline.cli.show", "an output's summary and its first batch, detokenized"),
    "data-path": ("pipeline.cli.data_path", "Megatron's --data-path / NeMo's data_prefix for a Megatron output"),
    "provenance": ("pipeline.cli.provenance", "the documents in global step k of a training run (--provenance)"),
    "removed": ("pipeline.cli.removed", "the documents a run removed or cut, with their text and deciding values"),
    "report": ("pipeline.cli.report", "one self-contained HTML page of what a run did (plots, counts, examples)"),
    "train-tokenizer": ("pipeline.cli.train_tokenizer", "train a SentencePiece model on a stratified sample"),
    "train-classifier": ("pipeline.cli.train_classifier", "train a fastText quality classifier (positive vs negative)"),
    "tokenizer-report": ("pipeline.cli.tokenizer_report", "compare tokenizers per subset (table, PNG, JSON)"),
    "reframe": ("pipeline.cli.reframe", "rewrite .jsonl.zst inputs as indexed frames, read in parallel by a job"),
}


def usage() -> str:
    """The list of commands."""
    width = max(map(len, COMMANDS))
    lines = ["usage: pile-pipeline COMMAND [flags]   (pile-pipeline COMMAND --help for its flags)",
             "       pile-pipeline --version", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the named command with the remaining arguments; its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"{created_by()} (Python {platform.python_version()})")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"pile-pipeline: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    return guarded(lambda args: importlib.import_module(module).cli(args), rest, f"pile-pipeline {name}")


def exiting(status: int) -> int:
    """`status`, for a process about to exit (pipeline/startup/command.py `exiting`).

    A run stopped by a signal exits here at once (`leave_if_stopped`).
    """
    leave_if_stopped(status)
    command.exiting()
    return status


def console() -> int:
    """The `pile-pipeline` console script."""
    command.one_command_per_process()
    return exiting(main())


if __name__ == "__main__":
    sys.exit(console())
