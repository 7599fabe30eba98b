"""Failures a job reports to its user as one line, without a traceback."""

from __future__ import annotations


class JobError(Exception):
    """A failure the user acts on: a damaged input, a full disk, an output refused.

    Its message is one line that names the file; the command prints it as it is
    (pipeline/beam/logs.py finds it even in the text of an error a worker process sent back).
    """
