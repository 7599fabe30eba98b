"""Progress reports from a job's workers to its driver: signed with a per-job key, bounded, validated.

The driver listens on a loopback UDP port, which any local process can write to. A report counts
only when it carries the HMAC-SHA256 of its body under the job's key (handed to the workers with
the job, never sent on the channel), is at most `MAX_REPORT_BYTES`, and holds a sender id and one
count per field, each an integer within [0, MAX_COUNT]. Anything else is dropped, so no datagram can
stop the progress thread or print figures no worker counted.

    >>> key = bytes(32)
    >>> report = sign(key, "a1", {"read": 5, "done": 0})
    >>> open_report(key, report, ("read", "done"))
    ('a1', {'read': 5, 'done': 0})
    >>> open_report(bytes([1]) * 32, report, ("read", "done")) is None
    True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets

MAX_REPORT_BYTES = 1024
MAX_COUNT = 1 << 62  # far above any corpus's bytes or tokens; keeps sums exact
_MAC_CHARS = 64  # hex of HMAC-SHA256
_SENDER = re.compile(r"^[0-9a-zA-Z_-]{1,64}$")


def new_key() -> bytes:
    """A fresh secret for one job's reports."""
    return secrets.token_bytes(32)


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def sign(key: bytes, sender: str, counts: dict[str, int]) -> bytes:
    """One report: the MAC of the body, a space, the body (JSON: the sender's id and its counts)."""
    body = json.dumps({"id": sender, **counts}, sort_keys=True, separators=(",", ":")).encode()
    return _mac(key, body) + b" " + body


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a count")


def open_report(key: bytes, datagram: bytes, fields: tuple[str, ...]) -> tuple[str, dict[str, int]] | None:
    """(sender, counts) of a report signed with `key` and within bounds; None for anything else."""
    if len(datagram) > MAX_REPORT_BYTES or datagram[_MAC_CHARS:_MAC_CHARS + 1] != b" ":
        return None
    mac, body = datagram[:_MAC_CHARS], datagram[_MAC_CHARS + 1:]
    if not hmac.compare_digest(mac, _mac(key, body)):
        return None
    try:
        message = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not _SENDER.match(message["id"]):
        return None
    counts = {}
    for field in fields:
        value = message.get(field)
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            return None
        counts[field] = value
    return message["id"], counts
