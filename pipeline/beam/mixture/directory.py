"""OUT of a job of several outputs, checked before anything is removed: ours to replace, or refused in one line."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

import fsspec

from pipeline.io.lock import LOCK_NAME
from pipeline.io.publish import TEMP_NAME
from pipeline.io.urls import redact_url


def entries_to_replace(output_dir: str, overwrite: bool, ours: Callable[[str], bool], job: str):
    """(filesystem, root, OUT's entries but the lock and temporary names), or None where OUT is not there.

    FileExistsError, nothing removed: OUT is a file, holds an entry `ours` does not claim (no `job`
    writes it), or is not empty without --overwrite.
    """
    fs, root = fsspec.core.url_to_fs(output_dir)
    shown = redact_url(output_dir)
    if not fs.exists(root):
        return None
    if not fs.isdir(root):
        raise FileExistsError(f"--output_dir {shown} exists and is not a directory")
    entries = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False, refresh=True))
    entries = [e for e in entries if e != LOCK_NAME and not TEMP_NAME.match(e)]
    foreign = [e for e in entries if not ours(e)]
    if foreign:
        raise FileExistsError(f"--output_dir {shown} holds {', '.join(foreign[:10])}, which no {job} writes: "
                              "choose an empty directory; nothing was removed")
    if entries and not overwrite:
        raise FileExistsError(f"--output_dir {shown} is not empty ({len(entries)} entries). Pass --overwrite to "
                              "replace it, or choose an empty directory.")
    return fs, root, entries
