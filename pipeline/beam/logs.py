"""Logging for our commands: our progress at INFO, Beam's own chatter only from WARNING up.

DirectRunner's worker processes forward their log lines to the driver through one logger; only
the lines our code wrote (or errors) are kept, shortened to their message.
"""

from __future__ import annotations

import logging
import os
import re


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


def configure_logging() -> None:
    """Our progress at INFO; Beam's own chatter only from WARNING up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    forwarded = logging.getLogger("apache_beam.runners.portability.local_job_service")
    forwarded.setLevel(logging.INFO)
    forwarded.addFilter(_OwnWorkerLogs())
