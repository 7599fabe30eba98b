"""A job's work folder: each finished work item committed where the output lives, so a killed run can resume.

    OUT/.resume/
      job.json                                   what decides the output's bytes (pipeline/process/fingerprint.py),
                                                 its digest and the runs that used the folder
      <kind>/<part>/<file>/<name>.item           one committed work item: a chunk's result ("result"), dedup's
                                                 input of a chunk ("dedup"), what a work item read ("unit")

Every file is published atomically (pipeline/io/publish.py: a temporary name and a rename on disks
and EFS, one PUT on object stores), without fsync or sha256: each carries its own check instead.
An item file is

    MAGIC (8 bytes) | header length (u64 little-endian) | header (JSON) | payload | xxh3-128 of all before (16 bytes)

and its header names the job's digest, the item's key and its payload's size. A file that fails
any of these (cut short, a byte changed, a key or job of another) is never trusted: `fetch` says
it is not there, and the work item is done again. A file a retried task writes again has the same
name and bytes. Shared by every runner: the folder is reached as the output is.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import struct
import time

import fsspec

from pipeline.io.publish import publish, temp_name
from pipeline.io.urls import fs_path, is_local, is_local_url, redact_url

LOG = logging.getLogger(__name__)
WORK_DIR = ".resume"
JOB_FILE = "job.json"
MAGIC = b"PILEWRK1"
_CHECK_BYTES = 16
MAX_HEADER_BYTES = 1 << 26


class WorkFolderError(OSError):
    """The work folder cannot be read or written (permissions, a full disk, a damaged job.json)."""


def work_url(output_dir: str) -> str:
    """OUT/.resume."""
    return posixpath.join(output_dir.rstrip("/"), WORK_DIR)


def _check(data) -> bytes:
    import xxhash

    return xxhash.xxh3_128_digest(data)


def encode_item(job: str, key: list, payload: bytes | memoryview, extra: dict | None = None) -> bytes:
    """An item file's bytes (module docstring)."""
    header = {"job": job, "key": key, "size": len(payload), **(extra or {})}
    text = json.dumps(header, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii")
    body = b"".join([MAGIC, struct.pack("<Q", len(text)), text, payload])
    return body + _check(body)


def decode_item(data: bytes, job: str, key: list) -> tuple[dict, memoryview]:
    """(header, payload) of an item file's bytes; ValueError saying why they are not the item `key` of `job`."""
    if len(data) < 16 + _CHECK_BYTES or data[:8] != MAGIC:
        raise ValueError("not a work item (cut short, or its first bytes are not ours)")
    if _check(memoryview(data)[:-_CHECK_BYTES]) != data[-_CHECK_BYTES:]:
        raise ValueError("its check does not match its bytes (cut short or changed)")
    (size,) = struct.unpack("<Q", data[8:16])
    if size > MAX_HEADER_BYTES or 16 + size > len(data) - _CHECK_BYTES:
        raise ValueError("its header is longer than the file")
    header = json.loads(data[16:16 + size])
    payload = memoryview(data)[16 + size:-_CHECK_BYTES]
    if header.get("job") != job or header.get("key") != key:
        raise ValueError("it is another job's or another item's")
    if header.get("size") != len(payload):
        raise ValueError("its payload is not the size its header says")
    return header, payload


def _read(url: str) -> bytes:
    """A file's bytes (FileNotFoundError when there is none)."""
    if is_local_url(url):
        with open(fs_path(url), "rb") as f:
            return f.read()
    fs, path = fsspec.core.url_to_fs(url)
    return fs.cat_file(path)


class WorkFolder:
    """One job's work folder (picklable: its location, the job's digest, the run's id).

    part: the step whose items they are (a digest of its config: two branches of one job never share
    an item); name: the item's name within its input file (a chunk's index, a work item's unit).
    """

    def __init__(self, output_dir: str, job: str, run_id: str):
        self.url = work_url(output_dir)
        self.job = job
        self.run_id = run_id

    def item_url(self, kind: str, part: str, file_index: int, name: str) -> str:
        """Where item `name` of input file `file_index` is committed."""
        return posixpath.join(self.url, kind, part or "-", f"{file_index:05d}", f"{name}.item")

    def commit(self, kind: str, part: str, file_index: int, name: str, payload: bytes | memoryview,
               extra: dict | None = None) -> str:
        """Publish one item (module docstring); its URL."""
        url = self.item_url(kind, part, file_index, name)
        data = encode_item(self.job, [kind, part, file_index, name], payload, {"run": self.run_id, **(extra or {})})
        publish(url, [data], sync=False, sha256=False)
        return url

    def fetch(self, kind: str, part: str, file_index: int, name: str) -> tuple[dict, memoryview] | None:
        """The item's (header, payload), or None when it was never committed, or is torn or foreign (then redone)."""
        url = self.item_url(kind, part, file_index, name)
        try:
            data = _read(url)
        except FileNotFoundError:
            return None
        try:
            return decode_item(data, self.job, [kind, part, file_index, name])
        except ValueError as e:
            LOG.warning("work item %s is not used: %s; it is done again", redact_url(url), e)
            return None

    def names(self, kind: str, part: str) -> dict[int, set[str]]:
        """The items of a kind and part by input file (their names; whether each is whole is `fetch`'s to say)."""
        root = posixpath.join(self.url, kind, part or "-")
        fs, path = fsspec.core.url_to_fs(root)
        try:
            fs.invalidate_cache(path)
            found = fs.find(path)
        except FileNotFoundError:
            return {}
        out: dict[int, set[str]] = {}
        for item in found:
            folder, name = posixpath.split(item)
            if name.endswith(".item") and not name.startswith("."):
                try:
                    out.setdefault(int(posixpath.basename(folder)), set()).add(name[:-len(".item")])
                except ValueError:
                    continue
        return out


def read_job(output_dir: str) -> dict | None:
    """OUT/.resume/job.json, or None when there is no work folder (WorkFolderError when it is not ours)."""
    url = posixpath.join(work_url(output_dir), JOB_FILE)
    try:
        data = _read(url)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise WorkFolderError(f"{redact_url(url)}: cannot be read ({e})") from None
    try:
        job = json.loads(data)
        if not isinstance(job, dict) or not isinstance(job.get("digest"), str) or not isinstance(job.get("runs"), list):
            raise ValueError("not a job.json of ours")
    except ValueError as e:
        raise WorkFolderError(f"{redact_url(url)} is damaged ({e}): pass --overwrite to start again") from None
    return job


def write_job(output_dir: str, job: dict) -> None:
    """Publish OUT/.resume/job.json (replacing the one there)."""
    text = json.dumps(job, indent=1, sort_keys=True) + "\n"
    publish(posixpath.join(work_url(output_dir), JOB_FILE), [text.encode("utf-8")])


def remove_work_folder(output_dir: str, attempts: int = 5) -> bool:
    """Delete OUT/.resume and what it holds; whether it is gone (a warning, not an error, when it stays)."""
    url = work_url(output_dir)
    fs, root = fsspec.core.url_to_fs(url)
    try:
        if is_local(fs):
            # Renamed away first (a temporary name, which --overwrite removes): a folder half removed
            # is never taken for a work folder.
            gone = posixpath.join(posixpath.dirname(root), temp_name("resume"))
            os.rename(root, gone)
            root = gone
    except FileNotFoundError:
        return True
    except OSError as e:
        LOG.warning("could not remove the work folder %s (%s); the next --overwrite removes it", redact_url(url), e)
        return False
    for attempt in range(attempts):
        try:
            fs.rm(root, recursive=True)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if attempt == attempts - 1:
                LOG.warning("could not remove the work folder %s (%s); the next --overwrite removes it",
                            redact_url(url), e)
                return False
            time.sleep(0.2 * (attempt + 1))
    return False
