"""`--split_by LABEL`: the buckets of a label's values, their directories, and the run's record of them.

    OUT/
      mixture.json                  the buckets as one mixture for tfdata.make_dataset (weights: label tokens)
      buckets.json                  the run's record: each bucket's counts and output, the run's own counts,
                                    its dead letters and removed/ files (FORMAT)
      hf.int_score=3/               one bucket: a complete TFRecord output (manifest.json, run-<id>/ shards)
      hf.int_score=none/            the kept documents without the label
      run-<id>/dead_letters/ ...    the run's dead letters and removed/ records: a bad line, or a document
      run-<id>/removed/ ...         a stage removed, is in no bucket

A kept document goes to the bucket of its value of the label (`bucket_of`: the value as text), or to
NONE when it has none. A bucket's directory is `<label>=<value>`, each part reduced to letters,
digits, `.`, `_` and `-` (`slug`: never `..`, never a path separator, never a leading dot); two
values whose directories are equal but for case are refused (`directories`), before the job when
the stages declare their values, else before any shard is written. Buckets are listed in `ordered`
order: by number when every value is one, else by text; NONE last.
"""

from __future__ import annotations

import json
import posixpath
import re

import fsspec

from pipeline.format.manifest import check_run, validate_run_entries

NONE = "none"  # the bucket of a kept document without the label
BUCKETS_NAME = "buckets.json"
FORMAT = "pile-buckets"
FORMAT_VERSION = 1
MAX_NAME = 100  # characters of a directory name's part: a longer value is cut and must stay distinct
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
BUCKET_DIR = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*=[A-Za-z0-9_-][A-Za-z0-9._-]*$")
MAX_BUCKETS_BYTES = 64 << 20  # a record of buckets: anything near this is not one
COUNTED_IF_WRITTEN = ("records", "label_tokens")  # a bucket's counts of its output, where it has one


class BucketError(ValueError):
    """Bucket directories that cannot be told apart, or a buckets.json that is not ours."""


def bucket_of(labels: dict | None, key: str) -> str:
    """The bucket of a kept document with these labels: its value of `key` as text, NONE without one."""
    value = (labels or {}).get(key)
    return NONE if value is None else str(value)


def slug(text: str) -> str:
    """`text` as a safe directory name part: `0.85` -> `0.85`, `a/b c` -> `a_b_c`, `..` -> `_.`."""
    name = _UNSAFE.sub("_", text)[:MAX_NAME] or "_"
    return "_" + name[1:] if name[0] == "." else name


def directory(key: str, value: str) -> str:
    """A bucket's directory under OUT: `hf.int_score=3`."""
    return f"{slug(key)}={slug(value)}"


def directories(key: str, values) -> dict[str, str]:
    """{value: its directory}; BucketError naming --split_by when two values would share one (case aside)."""
    out = {value: directory(key, value) for value in values}
    seen: dict[str, str] = {}
    for value, name in out.items():
        other = seen.setdefault(name.lower(), value)
        if other != value:
            raise BucketError(f"--split_by {key}: the values {other!r} and {value!r} would share the bucket "
                              f"directory {name} (names are made of letters, digits, '.', '_' and '-', case "
                              "aside); relabel one of them")
    return out


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return None if number != number else number  # NaN has no place in an order


def ordered(values) -> list[str]:
    """The buckets' order: by number when every value but NONE is one, else by text; NONE last."""
    values = sorted(set(values))
    named = [v for v in values if v != NONE]
    if all(_number(v) is not None for v in named):
        named.sort(key=lambda v: (_number(v), v))
    return named + ([NONE] if NONE in values else [])


def is_bucket_dir(name: str) -> bool:
    """Whether a name directly in OUT is a bucket's directory (`<label>=<value>`)."""
    return bool(BUCKET_DIR.match(name))


def buckets_path(output_dir: str) -> str:
    """OUT/buckets.json."""
    return posixpath.join(output_dir.rstrip("/"), BUCKETS_NAME)


def load_buckets(path: str) -> dict:
    """A buckets.json of ours, read and checked (BucketError otherwise): the bucket directories it names are safe."""
    try:
        with fsspec.open(path, "rb") as f:
            record = json.loads(f.read(MAX_BUCKETS_BYTES + 1))
    except (OSError, ValueError, RecursionError) as e:
        raise BucketError(f"{path}: not a readable buckets.json ({str(e)[:200]})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise BucketError(f"{path}: not a buckets.json of this pipeline (format {FORMAT!r} expected)")
    if record.get("format_version") != FORMAT_VERSION:
        raise BucketError(f"{path}: format_version {record.get('format_version')!r}; this reader understands "
                          f"{FORMAT_VERSION}")
    buckets = record.get("buckets")
    if not isinstance(buckets, list) or not all(
            isinstance(b, dict) and isinstance(b.get("directory"), str) and is_bucket_dir(b["directory"])
            for b in buckets):
        raise BucketError(f"{path}: `buckets` must list objects with a bucket directory (<label>=<value>)")
    for i, bucket in enumerate(buckets):
        counts = [bucket.get(k) for k in ("documents", "tokens")] + [bucket.get(k, 0) for k in COUNTED_IF_WRITTEN]
        if (not isinstance(bucket.get("value"), str) or not isinstance(bucket.get("manifest"), str | None)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)):
            raise BucketError(f"{path}: buckets[{i}] is not a bucket's entry (value, directory, manifest, counts)")
    if not isinstance(record.get("run_id"), str) or not isinstance(record.get("split_by"), str):
        raise BucketError(f"{path}: `run_id` and `split_by` must be strings")
    check_run(record, path, validate_run_entries(record, path))
    return record
