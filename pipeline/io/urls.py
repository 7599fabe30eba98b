"""Locations: local paths, EFS mounts and fsspec URLs (s3://, gs://), and keeping credentials out of them.

Credentials come from the environment or the instance role, never from a URL: a
`scheme://user:secret@...` URL would otherwise reach error messages, logs, dead letters and the
manifest. `refuse_credentials` stops a job that was given one; `redact_url` is applied to every
location shown anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import fsspec

_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")
# Object stores make an object visible only once its one PUT is complete and have no rename
# (s3fs's mv is copy + delete).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


def redact_url(path: str) -> str:
    """Drop any `user:secret@` part of a URL so that credentials never reach logs or outputs."""
    return _USERINFO.sub(r"\1", path)


def refuse_credentials(locations: Iterable[tuple[str, str]]) -> None:
    """Raise ValueError for the first (flag, location) whose URL carries credentials; never echo them."""
    for flag, url in locations:
        if redact_url(url) != url:
            raise ValueError(
                f"{flag} {redact_url(url)!r}: credentials in URLs are refused. Give them through the "
                "environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "GOOGLE_APPLICATION_CREDENTIALS) or the instance role."
            )


def protocols(fs) -> tuple[str, ...]:
    """The protocol names of an fsspec filesystem."""
    return fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local one."""
    return "file" in protocols(fs)


def is_object_store(fs) -> bool:
    """Whether an fsspec filesystem is an object store (one PUT per object, no atomic rename)."""
    return bool(OBJECT_STORES.intersection(protocols(fs)))


def is_local_url(url: str) -> bool:
    """Whether a location is on this machine's filesystem (a plain path or file://)."""
    protocol, _ = fsspec.core.split_protocol(url)
    return protocol in (None, "file", "local")


def fs_path(url: str) -> str:
    """The filesystem-internal path of a location (what its fsspec filesystem's methods take)."""
    return fsspec.core.url_to_fs(url)[1]
