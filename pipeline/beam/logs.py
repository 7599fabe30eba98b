"""Logging for our commands: our progress at INFO, Beam's own chatter only from WARNING up.

DirectRunner's worker processes forward their log lines to the driver through one logger; only
the lines our code wrote (or errors) are kept, shortened to their message.

A job that fails on one of our errors (a `JobError`: a damaged input, a full disk, an output
refused) ends with that error's one line (`failure_line`), not with worker tracebacks: Beam's own
reports of the failed bundle, logged or printed by workers in this process, are left out, since the
exception the job ends with repeats them (and any other failure still ends with its whole traceback).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys

from pipeline.core.errors import JobError
from pipeline.io.signals import caught_signal
from pipeline.io.urls import redact_text

# How a traceback's last line names an exception of ours: "pipeline.io.decompress.CorruptInputError: ..."
_RAISED = re.compile(r"^(pipeline(?:\.\w+)+)\.(\w+): (.+)$", re.M)
_WHILE_RUNNING = re.compile(r" \[while running '[^']*'\]")


class JobFailed(Exception):
    """The job failed on one of our errors; the message is that error's one line."""


def _job_error_class(module: str, name: str) -> bool:
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, JobError)


def failure_line(exc: BaseException) -> str | None:
    """The one line to report for a failed job when the failure is a JobError, else None.

    On DirectRunner in one process the error comes back as itself; from worker processes (and
    remote runners) only as text: the last line that names one of our JobError classes.
    """
    seen = exc
    while seen is not None:
        if isinstance(seen, JobError):
            return _WHILE_RUNNING.sub("", str(seen)).splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    for match in reversed(list(_RAISED.finditer(str(exc)))):
        if _job_error_class(match.group(1), match.group(2)):
            return _WHILE_RUNNING.sub("", match.group(3)).strip()
    return None


# Beam's SDK worker stops without waiting for its bundles in flight (its thread pool is shared and never
# waits): a bundle the runner gave up on, as a job fails, ends in a KeyError when it returns its
# processor to a cache the shutdown emptied. Its traceback is an echo of the failure, never a cause.
_ABANDONED_BUNDLE = re.compile(r"in release\n.*KeyError: 'bundle_\d+'\s*$", re.S)


class _QuietJobErrors:
    """sys.stderr, less the tracebacks Beam's workers print of a bundle that failed on one of our JobErrors.

    Beam's SDK worker prints each failed bundle's traceback itself (`print(..., file=sys.stderr)`)
    before the job fails with it; the job then ends with that error's one line (`failure_line`).
    So do its bundles that fail as a signal stops the run (which ends with its own one line), and
    the bundles cut short as the runner stops its workers after such a failure (`_ABANDONED_BUNDLE`,
    and any traceback after a JobError's in this process). Any other traceback is printed as it is.
    """

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False
        self._failed = False  # a bundle in this process failed on a JobError

    def write(self, text: str) -> int:
        dropped, self._dropped = self._dropped, False
        if text.startswith("Traceback (most recent call last)"):
            if failure_line(Exception(text)) is not None:
                self._failed = True
            if self._failed or caught_signal() is not None or _ABANDONED_BUNDLE.search(text):
                self._dropped = True
                return len(text)
        if dropped and text == "\n":  # print's line end after the traceback
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def quiet_job_error_tracebacks():
    """While the job runs in this process, Beam's tracebacks of bundles that failed on a JobError are left out.

    After a job stopped by a signal or failed on a JobError the filter stays: worker threads the
    runner gave up on may still print as they end.
    """
    stream = sys.stderr
    sys.stderr = _QuietJobErrors(stream)
    keep = False
    try:
        yield
    except BaseException as e:
        keep = failure_line(e) is not None
        raise
    finally:
        if not keep and caught_signal() is None:
            sys.stderr = stream


class _NoBundleFailureReports(logging.Filter):
    """Leave out Beam's reports of a failed bundle (the job's final exception repeats them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.name.startswith("apache_beam"):
            return True
        text = record.getMessage()
        return not (record.exc_info or "Traceback (most recent call last)" in text or "[while running" in text)


class _OwnWorkerLogs(logging.Filter):
    """Keep the log lines DirectRunner's workers forward only when our code wrote them (or errors)."""

    _FIELDS = re.compile(r'message: "(?P<msg>.*?)"(?: instruction_id| log_location| thread|\s*$)', re.S)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        location = text.rsplit("log_location", 1)[-1]
        ours = f"{os.sep}pipeline{os.sep}" in location and "site-packages" not in location
        if not ours and record.levelno < logging.ERROR:
            return False
        match = self._FIELDS.search(text)
        if match:
            record.msg, record.args = "worker: %s", (match.group("msg"),)
        return True


class _OursOnceStopped(logging.Filter):
    """Once a signal stops the run, only our own lines: a runner's reports of the workers it loses are the stop.

    (A local Dask cluster's nannies, for one, log each worker's death and their failed restarts.)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return caught_signal() is None or record.name == "pipeline" or record.name.startswith("pipeline.")


class _Redacted(logging.Filter):
    """Every URL in a log line is shown redacted (pipeline/io/urls.py): userinfo and query-string secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shown = redact_text(text)
        if shown != text:
            record.msg, record.args = shown, ()
        return True


def configure_logging() -> None:
    """Our progress at INFO; Beam's own chatter only from WARNING up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    forwarded = logging.getLogger("apache_beam.runners.portability.local_job_service")
    forwarded.setLevel(logging.INFO)
    forwarded.addFilter(_OwnWorkerLogs())
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NoBundleFailureReports())
        handler.addFilter(_OursOnceStopped())
        handler.addFilter(_Redacted())
