"""Locations: local paths, EFS mounts and fsspec URLs (s3://, gs://), and keeping credentials out of them.

Credentials come from the environment or the instance role, never from a URL: a
`scheme://user:secret@...` URL would otherwise reach error messages, logs, dead letters and the
manifest. `refuse_credentials` stops a job that was given one; `redact_url` is applied to every
location shown anywhere.

Where the userinfo ends cannot be told from the text alone: AWS secrets hold `/` (so the first `/`
is not the end of the host) and may hold `@` (so the first `@` is not either). A URL is therefore
taken to carry credentials when an `@` follows a first segment that is not a plain host or bucket
name, or when its first segment holds an `@` (see `has_credentials`), and such a URL is never shown
past its scheme. A typo such as `s3:/KEY:SECRET@bucket` (one slash) is read the same way.

Presigned and SAS URLs are allowed (they are how a store grants one object), but the values of
their secret query parameters (signatures, credentials, tokens) are never shown: `redact_url`
replaces them, and `redact_text` does so for every URL inside a message (every log line goes
through it).
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterable, Iterator

import fsspec

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# What may come before the first "/" of a URL without credentials: a bucket name (lower case, as
# S3 and GCS require: an access key id is upper case), or a host name with a port where the scheme
# has ports.
_BUCKET = re.compile(r"^[a-z0-9._-]*$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9._-]*(:[0-9]*)?$")
# A scheme followed by other than "//" (a typo such as `s3:/KEY:SECRET@bucket`); two letters at
# least, so that a Windows drive (C:) is no scheme.
_LOOSE_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+):/*")
# Query parameters that carry a secret in presigned and SAS URLs: AWS (X-Amz-Signature,
# X-Amz-Credential, X-Amz-Security-Token, AWSAccessKeyId, Signature), GCS (X-Goog-Signature,
# X-Goog-Credential, GoogleAccessId), Azure SAS (sig), and any token, key, secret or password.
_SECRET_PARAM = re.compile(r"(?i)(signature|credential|token|secret|passw|accessid|accesskey|^sig$|^key$|"
                           r"api[-_]?key|^code$|^auth)")
# A `;` is part of a URL (matrix or query parameters) unless another URL follows it.
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]+:/{1,3}(?:[^\s'\"<>,;()\[\]]|;(?![a-zA-Z][a-zA-Z0-9+.-]+:/))+")
# Where a URL's parameters are cut apart (the separators kept): a secret's value ends at the next one.
_PARAM_SEP = re.compile(r"([&;#,?])")
# A secret parameter that a URL's match in a text stopped short of (after a comma, say).
_PARAM_IN_TEXT = re.compile(r"(?<=[?&;#,])([A-Za-z0-9_.%-]+)=(<removed>|[^\s&;#,'\"<>()\[\]]*)")
_SCHEMES_WITH_HOSTS = frozenset({"http", "https", "ftp", "sftp", "ssh", "hdfs", "webhdfs"})
# Object stores make an object visible only once its one PUT is complete and have no rename
# (s3fs's mv is copy + delete).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


def _malformed(url: str) -> tuple[str, str] | None:
    """(scheme, the rest) of a URL whose scheme is followed by other than two slashes (`s3:/KEY:SECRET@b/x`)."""
    match = _LOOSE_SCHEME.match(url)
    if not match or url[match.end(1):].startswith("://"):
        return None
    return match.group(1), url[match.end():]


def has_credentials(url: str) -> bool:
    """Whether a URL may carry a `user[:secret]@` part before its host, whatever the secret holds.

    `s3://bucket/a@b.jsonl` (an `@` in a key) is not refused: its first segment is a bucket name.
    `s3://KEY:SE/CRET@bucket/...` and `s3://AKIDEXAMPLE/SE@bucket/...` are: neither `KEY:SE` nor
    `AKIDEXAMPLE` is a bucket name.
    """
    match = _SCHEME.match(url)
    if match:
        scheme, rest = match.group(1), url[match.end():]
    elif malformed := _malformed(url):
        scheme, rest = malformed  # a typo: whatever follows may still be userinfo
    else:
        return False  # a local path
    rest = rest.split("?", 1)[0] if scheme.lower() in _SCHEMES_WITH_HOSTS else rest
    rest = rest.lstrip("/")  # `s3:///KEY:SECRET@bucket`: a slash too many hides nothing
    if "@" not in rest:
        return False
    first = rest.split("/", 1)[0]
    if "@" in first:
        return True  # user[:secret]@host
    host = _HOST_PORT if scheme.lower() in _SCHEMES_WITH_HOSTS else _BUCKET
    return not host.match(first)


def _is_secret(name: str) -> bool:
    return bool(_SECRET_PARAM.search(urllib.parse.unquote(name)))


def _redact_params(text: str) -> str:
    """`text` with the value of every `name=value` whose name may be a secret replaced (pieces split by _PARAM_SEP)."""
    pieces = _PARAM_SEP.split(text)
    out = []
    for piece in pieces:
        name, eq, _ = piece.partition("=")
        out.append(f"{name}=<removed>" if eq and _is_secret(name) else piece)
    return "".join(out)


def _redact_query(url: str) -> str:
    """The URL with the value of every parameter that may be a secret replaced (presigned URLs).

    Parameters follow the first `?`, `#` or `;` and are separated by any of `&;#,?`: the query of a
    presigned URL, matrix parameters, a fragment (`#access_token=...`).
    """
    start = min((i for i in (url.find(c) for c in "?#;") if i >= 0), default=-1)
    if start < 0:
        return url
    return url[:start] + _redact_params(url[start:])


def redact_url(path: str) -> str:
    """The location as it may be shown, without userinfo or query-string secrets.

    A URL that may carry userinfo is cut after its scheme; the secret parameters of a query string
    (presigned URLs: signatures, credentials, tokens) lose their values.
    """
    if has_credentials(path):
        scheme = (_SCHEME.match(path) or _LOOSE_SCHEME.match(path)).group(1)
        return f"{scheme}://<credentials removed>"
    return _redact_query(path) if _SCHEME.match(path) else path


def redact_text(text: str) -> str:
    """`text` (an error message, a log line) with every URL in it redacted (`redact_url`)."""
    def one(match: re.Match) -> str:
        url = match.group(0).rstrip(".:;!?")  # the sentence's punctuation, not the URL's
        return redact_url(url) + match.group(0)[len(url):]

    def param(match: re.Match) -> str:
        if not _is_secret(match.group(1)):
            return match.group(0)
        value = match.group(2)
        return f"{match.group(1)}=<removed>" + value[len(value.rstrip(".:!?")):]  # the sentence's punctuation

    return _PARAM_IN_TEXT.sub(param, _URL_IN_TEXT.sub(one, text))


def refuse_credentials(locations: Iterable[tuple[str, str | None]]) -> None:
    """Raise ValueError for the first (flag, location) whose URL carries credentials; never echo them.

    A location of None (an optional flag not given) is skipped.
    """
    for flag, url in locations:
        if url is not None and has_credentials(url):
            raise ValueError(
                f"{flag} {redact_url(url)}: credentials in URLs are refused (nothing after the scheme is "
                "shown). Give them through the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS) or the instance role."
            )


class UnreachableError(ConnectionError):
    """A store (an S3 endpoint, a bucket's host) cannot be reached: one line naming the location."""


def _is_connection_failure(exc: BaseException) -> bool:
    # botocore's EndpointConnectionError, aiohttp's ClientConnectorError, urllib3's and the
    # builtin ConnectionError: the stores' clients have no common base class for this.
    return isinstance(exc, ConnectionError) or any("Connect" in c.__name__ for c in type(exc).__mro__)


@contextlib.contextmanager
def reaching(flag: str, url: str) -> Iterator[None]:
    """Turn a failure to reach the store holding `url` into an UnreachableError naming the flag."""
    try:
        yield
    except UnreachableError:
        raise
    except Exception as e:
        if not _is_connection_failure(e):
            raise
        endpoint = "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the region" if url.startswith("s3") else "the endpoint"
        raise UnreachableError(
            f"{flag} {redact_url(url)}: cannot reach the store ({type(e).__name__}: {str(e)[:200]}); check "
            f"{endpoint} and the network"
        ) from None


def name_part(url: str) -> str:
    """The part of a location that names the file: an http(s) URL without its query.

    A presigned URL's signature follows the name, whose extension says how the file is compressed.
    """
    match = _SCHEME.match(url)
    if match and match.group(1).lower() in ("http", "https"):
        return url.split("?", 1)[0].split("#", 1)[0]
    return url


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
