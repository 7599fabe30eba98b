"""The output directory: what a run of ours writes there, committing a run's output, and replacing one.

    OUT/
      manifest.json                                        written last, create-only
      run-<run id>/train-00000-of-00042.tfrecord ...       the shards of the run the manifest names
      run-<run id>/train-00000-of-00042.bin/.idx ...       or those of a Megatron output (pipeline/format/megatron.py)
      run-<run id>/train-00000-of-00042.jsonl.zst ...      or those of a JSON-lines output (pipeline/format/jsonl.py)
      run-<run id>/dead_letters/train-00001-00000.jsonl    malformed lines of input file 1, chunks 0-63
      run-<run id>/provenance/train-00001.npz              with --provenance: source spans of file 1's records
      dataset_info.json, features.json                     TensorFlow Datasets' metadata of a TFRecord output
                                                           (pipeline/format/tfds.py)
      latest -> run-<run id>                               a Megatron output's stable --data-path root, a JSON-
                                                           lines output's folder (a symbolic link, on file systems)
      .pile-pipeline.lock                                  while a run writes (pipeline/io/lock.py)
      .resume/                                             the work items a run committed, until it succeeds
                                                           (pipeline/io/workfolder.py): what --resume takes up
      .NAME.tmp-<uuid>                                     temporary names (pipeline/io/publish.py), spill files

Runs never share a file: each writes into a directory of its own, named by a random run id, and the
manifest records that id and lists the run's files by their paths in that directory (readers check
it: pipeline/format/manifest.py). However two runs interleave, a manifest lists only files of the
run that wrote it, and no other run ever writes those. The bytes of every shard and dead-letter
file are the same on every run of the same input and config; the manifest differs only by the id.

Committing (`commit_output`, the job's last step): an output nobody should use (no records, or more
dead letters than allowed) is refused first, and no manifest is written. Then the manifest is written
create-only: of two runs, the one that finishes second fails, and its files stay in its own run
directory. Then every file the manifest lists is checked to be there with its size (a concurrent
`--overwrite` could have removed it). Only then, by the run whose manifest it is, what is derived
from the manifest: TFDS's metadata files (a TFRecord output), or the `latest` link to the run
directory (a Megatron or JSON-lines output on a file system), renamed over the old one, so a path under
`OUT/latest/` names the latest complete output, whatever the run id.

Replacing (`prepare_output_dir` with `--overwrite`, under the lock): exactly the files the previous
manifest lists, our temporary names, what runs that never wrote a manifest (killed or failed)
left in their run directories, and what is derived from a manifest (the `latest` link when it points
at a run directory; TFDS's metadata beside a run directory) are removed, the manifest first. Anything
else (a `latest` of someone else's, say) is refused and listed,
and then nothing is removed. On a local disk the files inside the old run and temporary directories
may go in a thread of their own (`background=True`, a `Removal`) while the new run starts: readers
refuse the old output from the moment its manifest is gone, and no new run's file is ever among them.
(Unlinking a large shard can wait on the device, e.g. on ext4 mounted with `discard`, with no CPU
used: time the new run's start need not spend.) `--overwrite` removes the work folder too; `--resume`
removes the rest, refusing a finished output (a manifest): the new run takes the folder up.
"""

from __future__ import annotations

import collections
import json
import os
import posixpath
import re
import threading
import uuid

import fsspec

from pipeline.core.errors import JobError
from pipeline.format import jsonl, megatron, tfds
from pipeline.format import manifest as manifest_lib
from pipeline.format.manifest import FORMAT, MANIFEST_NAME, manifest_path, run_dir, serialize
from pipeline.io.files import read_bytes
from pipeline.io.lock import LOCK_NAME
from pipeline.io.publish import TEMP_NAME, publish_link, publish_text, temp_name
from pipeline.io.urls import fs_path, is_local, is_local_url, reaching, redact_url
from pipeline.io.workfolder import WORK_DIR

DEAD_LETTER_DIR = "dead_letters"
REMOVED_DIR = "removed"  # documents removed by --dedup / --decontaminate, written like dead letters
RUN_DIR = re.compile(r"^run-([0-9a-f]{16})$")
PROVENANCE_DIR = "provenance"  # pipeline/format/provenance.py
# The files a run writes into its run directory: TFRecord shards, Megatron .bin/.idx pairs, JSON-lines
# shards, dead letters, provenance.
_RUN_FILE = re.compile(r"^run-([0-9a-f]{16})/([A-Za-z0-9_]+-\d{5}-of-\d{5}\.(tfrecord|jsonl\.zst)|"
                       r"[A-Za-z0-9_]+(-[A-Za-z0-9_]+)?-\d{5}-of-\d{5}\.(bin|idx)|"
                       + DEAD_LETTER_DIR + r"/[A-Za-z0-9_]+-\d{5}-\d{5}(-only)?\.jsonl|"
                       + REMOVED_DIR + r"/[A-Za-z0-9_]+-\d{5}-\d{5}\.jsonl|"
                       + PROVENANCE_DIR + r"/[A-Za-z0-9_]+-(\d{5}|final)\.npz)$")
# The work folder's files (pipeline/io/workfolder.py, pipeline/process/commit.py).
_WORK_FILE = re.compile(r"^" + re.escape(WORK_DIR) + r"/(job\.json|(result|dedup|unit)/([0-9a-f]{12}|-)/\d{5}/"
                        r"(\d{8}|whole|frame-\d{8}|group-\d{6})\.item)$")
MAX_LISTED = 20
LATEST_NAME = "latest"  # OUT/latest -> run-<id> of a Megatron or JSON-lines output's manifest
# Derived from a manifest, never data of their own: an interrupted --overwrite may leave them
# without one, so they are always removable.
_DERIVED = {LATEST_NAME, *tfds.metadata_names()}
OWN_FORMATS = (FORMAT, megatron.FORMAT, jsonl.FORMAT)  # the `format` markers of the manifests we write


class OutputRejectedError(JobError):
    """The job's output must not be used (no records, too many dead letters): no manifest is written."""


class ConcurrentRunError(JobError):
    """Another run wrote this output's manifest first, or removed files of this run."""


def new_run_id() -> str:
    """A new random run id (64 bits: two runs never draw the same)."""
    return uuid.uuid4().hex[:16]


def is_run_file(rel: str) -> bool:
    """Whether a path relative to the output directory is one a run of ours writes in its directory."""
    return bool(_RUN_FILE.match(rel))


def run_path(run_id: str, name: str) -> str:
    """A file of run `run_id`, relative to the output directory (the manifest's paths)."""
    return f"{run_dir(run_id)}/{name}"


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00000-of-00042.tfrecord`."""
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def dead_letter_name(split: str, file_index: int, chunk_index: int, own: bool = False) -> str:
    """`dead_letters/train-00001-00064.jsonl`: dead letters of input file 1 from chunk 64 on.

    A file covers a span of chunks (pipeline/beam/chunk_documents.py, DEAD_LETTER_SPAN), except a chunk
    with many dead letters, which has its own: `train-00001-00070-only.jsonl`.
    """
    return f"{DEAD_LETTER_DIR}/{split}-{file_index:05d}-{chunk_index:05d}{'-only' if own else ''}.jsonl"


def removed_name(split: str, file_index: int, chunk_index: int) -> str:
    """`removed/train-00001-00064.jsonl`: documents of input file 1 removed by dedup, from chunk 64 on."""
    return f"{REMOVED_DIR}/{split}-{file_index:05d}-{chunk_index:05d}.jsonl"


def _is_temp(rel: str) -> bool:
    """A temporary name of ours, or a file inside a temporary directory (the spill files)."""
    return any(TEMP_NAME.match(part) for part in rel.split("/"))


def _is_work(rel: str) -> bool:
    """A file of the work folder (pipeline/io/workfolder.py) named as we name them (a stranger's file there is not)."""
    return bool(_WORK_FILE.match(rel))


def _files(fs, root: str) -> dict[str, int]:
    """Every file under `root` (relative path -> size), the lock left out."""
    fs.invalidate_cache(root)
    found = fs.find(root, detail=True)
    prefix = root.rstrip("/") + "/"
    files = {path[len(prefix):]: info.get("size") or 0 for path, info in found.items() if path.startswith(prefix)}
    files.pop(LOCK_NAME, None)
    return files


def _entries(fs, root: str) -> list[str]:
    """The names directly in `root` (an empty folder too), the lock left out."""
    names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False, refresh=True)]
    return sorted(n for n in names if n != LOCK_NAME)


def listed_files(manifest: dict) -> dict[str, int | None]:
    """The files a manifest lists (paths relative to the output directory) and their sizes.

    A shard is one file (`path`, `bytes`), or a Megatron .bin/.idx pair (`bin` and `idx`, each with
    `path` and `bytes`); dead letters, removed documents and provenance files are listed with `path` and `bytes`.
    """
    files = {}
    for shard in manifest.get("shards", []):
        for entry in (shard.get("bin"), shard.get("idx")) if "bin" in shard else (shard,):
            files[entry["path"]] = entry.get("bytes")
    for key in ("dead_letters", "provenance", "removed"):
        for entry in (manifest.get(key) or {}).get("files", []):
            files[entry["path"]] = entry.get("bytes")
    return files


def _listed(manifest: dict) -> set[str]:
    """The files a manifest lists, itself included."""
    return {MANIFEST_NAME, *listed_files(manifest)}


def own_listing(manifest) -> tuple[set[str], str]:
    """(the files a manifest of ours lists, itself included; its run id), or ValueError saying why it is not ours.

    A manifest is read back from disk, where anyone may have written or edited it: it widens what
    `--overwrite` removes only when it carries our format marker and a run id, and lists nothing
    but names our writers produce inside that run's own directory.
    """
    if not isinstance(manifest, dict) or manifest.get("format") not in OWN_FORMATS:
        raise ValueError("not a manifest of this pipeline: no format marker of ours")
    run_id = manifest.get("run_id")
    if not isinstance(run_id, str) or not RUN_DIR.match(run_dir(run_id)):
        raise ValueError("not a manifest of this pipeline: no run id")
    listed = _listed(manifest)
    strangers = sorted(rel for rel in listed - {MANIFEST_NAME}
                       if not isinstance(rel, str) or not (m := _RUN_FILE.match(rel)) or m.group(1) != run_id)
    if strangers:
        raise ValueError(f"it lists files that are not its run's own: {', '.join(map(str, strangers[:5]))}")
    return listed, run_id


def _derived(url: str, rel: str, runs: bool) -> bool:
    """Whether `rel` is a file ours derived from a manifest: the `latest` link to a run directory, TFDS's metadata.

    A `latest` that is not our link (a file, a link elsewhere) and metadata beside no run of ours
    are someone else's.
    """
    if rel == LATEST_NAME:
        return latest_run(url) is not None
    return rel in _DERIVED and runs


# Megatron-core's GPTDataset, given no path_to_cache (--data-cache-path), caches its indices in
# <prefix>/cache/GPTDataset_indices/ (megatron/core/datasets/gpt_dataset.py): inside our run directory.
MEGATRON_CACHE = re.compile(r"(^|/)cache/[A-Za-z]*Dataset_indices/")


def _plan_overwrite(url: str, files: list[str], entries: list[str]) -> tuple[list[str], list[str]]:
    """(files to remove, files or folders that are not ours) for --overwrite of the output at `url`."""
    listed: set[str] = set()
    committed = None
    unknown = []
    if MANIFEST_NAME in files:
        try:
            listed, committed = own_listing(json.loads(read_bytes(manifest_path(url))))
        except (ValueError, OSError, KeyError, TypeError, AttributeError) as e:
            unknown.append(f"{MANIFEST_NAME} (unreadable or not ours, so what it lists is unknown: {str(e)[:120]})")
    remove = []
    runs = any(RUN_DIR.match(entry) for entry in entries)
    for rel in files:
        run = _RUN_FILE.match(rel)
        if (rel in listed or _is_temp(rel) or _is_work(rel) or (run and run.group(1) != committed)
                or _derived(url, rel, runs)):
            remove.append(rel)
        elif not (rel == MANIFEST_NAME and unknown):
            unknown.append(rel)
    tops = {rel.split("/", 1)[0] for rel in files}
    for entry in entries:  # what no file shows: empty folders
        if entry not in tops and not (TEMP_NAME.match(entry) or RUN_DIR.match(entry) or entry == WORK_DIR):
            unknown.append(entry + "/")
    return remove, unknown


class Removal:
    """Files of a replaced local output removed in a thread of their own, then their emptied folders.

    `wait()` before the output's lock is released: it returns once every file is gone or refused,
    with what could not be removed (`relative path: reason`), in the order tried.
    """

    def __init__(self, root: str, rels: list[str], entries: list[str]):
        self._failed: list[str] = []
        self._thread = threading.Thread(target=self._remove, args=(root, rels, entries),
                                        name="pile-overwrite-removal", daemon=True)
        self._thread.start()

    def _remove(self, root: str, rels: list[str], entries: list[str]) -> None:
        for rel in rels:
            try:
                os.unlink(os.path.join(root, rel))
            except FileNotFoundError:
                pass  # gone already: what the removal is for
            except OSError as e:
                self._failed.append(f"{rel}: {e.strerror or e}")
        _remove_empty_folders(root, rels, entries)

    def wait(self) -> list[str]:
        """Wait for the removal; the files it could not remove, with why."""
        self._thread.join()
        return list(self._failed)


def prepare_output_dir(output_dir: str, overwrite: bool, background: bool = False,
                       resume: bool = False) -> Removal | None:
    """Check the output directory (already created and locked), refusing a non-empty one unless `overwrite` or `resume`.

    With `overwrite` or `resume`, see the module docstring for what is removed and what is refused.
    With `background` and a local output, the files inside run and temporary directories are removed
    by the `Removal` returned (everything directly in the directory, the manifest first, is gone when
    this returns); otherwise everything is, and None is returned.
    """
    shown = redact_url(output_dir)
    with reaching("--output_dir", output_dir):
        fs, root = fsspec.core.url_to_fs(output_dir)
        if not fs.exists(root):
            return None
        if not fs.isdir(root):
            raise FileExistsError(f"--output_dir {shown} exists and is not a directory")
        entries = _entries(fs, root)
        if not entries:
            return None
        files = _files(fs, root)
        if resume and MANIFEST_NAME in files:
            raise FileExistsError(f"--resume: {shown} holds a finished output ({MANIFEST_NAME}): there is nothing to "
                                  "resume. Pass --overwrite to replace it, or choose another directory.")
        if not overwrite and not resume:
            if WORK_DIR in entries and MANIFEST_NAME not in files:
                raise FileExistsError(
                    f"--output_dir {shown} holds a run that did not finish ({WORK_DIR}/: the work items it "
                    "committed). Pass --resume to take it up, or --overwrite to start again.")
            state = "a finished output" if MANIFEST_NAME in files else "an incomplete or foreign output"
            raise FileExistsError(
                f"--output_dir {shown} is not empty ({state}: {len(entries)} entries). Pass --overwrite to "
                "replace it, or choose an empty directory."
            )
        remove, unknown = _plan_overwrite(output_dir, sorted(files), entries)
        if resume:  # the work folder is what the run takes up
            remove = [rel for rel in remove if not _is_work(rel) or _is_temp(rel)]
        if unknown:
            more = f" and {len(unknown) - MAX_LISTED} more" if len(unknown) > MAX_LISTED else ""
            cache = [u for u in unknown if MEGATRON_CACHE.search(u)]
            note = (f" {len(cache)} of them are Megatron's dataset cache, which GPTDataset writes beside each "
                    "prefix when given no cache path: remove it, and give Megatron --data-cache-path (or "
                    "path_to_cache) outside the output." if cache else "")
            raise FileExistsError(
                f"--{'resume' if resume else 'overwrite'} refused: {shown} holds {len(unknown)} file(s) or folder(s) "
                "that no output of "
                f"this pipeline lists: {', '.join(unknown[:MAX_LISTED])}{more}.{note} Move them away or choose "
                "another directory; nothing was removed."
            )
        if not resume and is_local(fs) and any(_is_work(rel) for rel in remove):
            # Renamed away first: the new run's work folder never meets the old one's files.
            moved = temp_name("resume")
            os.rename(posixpath.join(root, WORK_DIR), posixpath.join(root, moved))
            remove = [moved + rel[len(WORK_DIR):] if _is_work(rel) else rel for rel in remove]
            entries = [moved if e == WORK_DIR else e for e in entries]
        # The manifest first: readers stop trusting the old output at once
        # (and the `latest` link after it).
        remove.sort(key=lambda r: (r != MANIFEST_NAME, r != LATEST_NAME))
        # With `background`, what lies inside run and temporary directories goes in a thread of its own.
        later = [rel for rel in remove if "/" in rel] if background and is_local(fs) else []
        now = [rel for rel in remove if "/" not in rel] if later else remove
        for rel in now:
            fs.rm_file(posixpath.join(root, rel))
        if later:
            return Removal(root, later, entries)
        if is_local(fs):
            _remove_empty_folders(root, remove, entries)
        return None


def _remove_empty_folders(root: str, removed: list[str], entries: list[str]) -> None:
    folders = {posixpath.dirname(rel) for rel in removed}
    folders |= {e for e in entries if TEMP_NAME.match(e) or RUN_DIR.match(e)}
    for folder in list(folders):
        while folder:
            folders.add(folder)
            folder = posixpath.dirname(folder)
    for folder in sorted(folders - {""}, key=lambda f: -f.count("/")):
        try:
            os.rmdir(os.path.join(root, folder))
        except OSError:
            pass  # not empty: something else is (or was) there


def remove_unfinished_run(output_dir: str, run_id: str) -> list[str]:
    """Remove what run `run_id` wrote into its run directory, unless its manifest was committed; returns it.

    Only our names (shards, dead letters, provenance, temporary names) are removed, never a stranger's.
    """
    fs, root = fsspec.core.url_to_fs(output_dir)
    try:
        committed = json.loads(read_bytes(manifest_path(output_dir))).get("run_id")
    except (OSError, ValueError, AttributeError):
        committed = None
    own = run_dir(run_id)
    if committed == run_id or not fs.exists(posixpath.join(root, own)):
        return []
    removed = [rel for rel in _files(fs, root) if rel.startswith(own + "/")
               and ((m := _RUN_FILE.match(rel)) and m.group(1) == run_id or _is_temp(rel))]
    for rel in removed:
        fs.rm_file(posixpath.join(root, rel))
    if is_local(fs):
        _remove_empty_folders(root, removed, [own])
    return removed


def remove_temp_files(output_dir: str, run_id: str) -> list[str]:
    """Remove the temporary files left in run `run_id`'s directories (by writers killed midway); returns them.

    A runner that runs a task again after losing a worker (Dask, Dataflow) leaves what the lost
    attempt had not renamed yet; the retry wrote the file under its final name. Every run directory
    of the run counts (a --per_subset output has one per subset).
    """
    fs, root = fsspec.core.url_to_fs(output_dir)
    if not fs.exists(root):
        return []
    own = run_dir(run_id)
    left = sorted(rel for rel in _files(fs, root) if own in rel.split("/")[:-1] and _is_temp(rel))
    for rel in left:
        fs.rm_file(posixpath.join(root, rel))
    return left


def dead_letter_lines(records: list[dict]) -> list[bytes]:
    """JSON lines (ending in a newline) of dead-letter records, sorted by (file, line) for byte-identical reruns."""
    records = sorted(records, key=lambda r: (r["file_index"], r["line"]))
    return [json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in records]


def check_output(manifest: dict, max_dead_letter_fraction: float, output_dir: str) -> None:
    """Refuse an output nobody should train on: no records, or too large a share of dead letters.

    Raises:
        OutputRejectedError: one line saying why and pointing at the dead letters.
    """
    totals, dead = manifest["totals"], manifest["dead_letters"]
    where = f"{redact_url(output_dir).rstrip('/')}/{run_dir(manifest['run_id'])}/{DEAD_LETTER_DIR}/"
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(dead["by_reason"].items())) or "none"
    lines, letters = totals["lines"], dead["records"]
    if totals.get("records", totals.get("documents", 0)) == 0:  # records, or a Megatron output's documents
        filtered: collections.Counter = collections.Counter()
        for subset in manifest["subsets"].values():
            filtered.update(subset.get("filtered", {}))
        why = ", ".join(f"{k}: {v}" for k, v in sorted(filtered.items())) or "none"
        raise OutputRejectedError(
            f"the job wrote no records: {lines} lines read, {letters} dead letters ({reasons}; see {where}), "
            f"documents filtered: {why}. No manifest was written."
        )
    if lines and letters / lines > max_dead_letter_fraction:
        raise OutputRejectedError(
            f"{letters} of {lines} lines ({letters / lines:.1%}) are dead letters ({reasons}), more than "
            f"--max_dead_letter_fraction {max_dead_letter_fraction:g}: see {where}. No manifest was written; fix "
            "the input, or pass a larger --max_dead_letter_fraction (1 accepts any) and --resume (the work done "
            "is taken up)."
        )


def _check_listed(output_dir: str, manifest: dict) -> None:
    """Every file the manifest lists is there with its size."""
    fs, root = fsspec.core.url_to_fs(output_dir)
    files = _files(fs, root)
    wrong = [path for path, size in listed_files(manifest).items()
             if path not in files or (size is not None and files[path] != size)]
    if wrong:
        raise ConcurrentRunError(
            f"{redact_url(output_dir)}: {len(wrong)} file(s) of this run are gone or changed since they were "
            f"written ({', '.join(wrong[:5])}): another run with --overwrite? The output is unusable: run "
            "the job again"
        )


def commit_output(output_dir: str, manifest: dict, max_dead_letter_fraction: float) -> str:
    """Check the output, write its manifest create-only (the job's last write) and check the files it lists.

    A retry of this step by the runner finds its own manifest and succeeds. Returns the manifest's path.

    Raises:
        OutputRejectedError: see `check_output`.
        ConcurrentRunError: another run's manifest is there, or files this one lists are gone.
    """
    check_output(manifest, max_dead_letter_fraction, output_dir)
    path = write_manifest(output_dir, manifest)
    _check_listed(output_dir, manifest)
    _publish_derived(output_dir, manifest)
    return path


def _publish_derived(output_dir: str, manifest: dict) -> None:
    """What the committed manifest implies: TFDS's metadata, or a Megatron or JSON-lines output's `latest` link."""
    if manifest.get("format") == manifest_lib.FORMAT:
        for name, text in tfds.metadata(manifest).items():
            publish_text(posixpath.join(output_dir.rstrip("/"), name), text)
    elif manifest.get("format") in (megatron.FORMAT, jsonl.FORMAT) and is_local_url(output_dir):
        publish_link(os.path.join(fs_path(output_dir), LATEST_NAME), run_dir(manifest["run_id"]))


def latest_run(output_dir: str) -> str | None:
    """The run id `OUT/latest` points at, or None (no link: an object store, or an older output)."""
    if not is_local_url(output_dir):
        return None
    try:
        target = os.readlink(os.path.join(fs_path(output_dir), LATEST_NAME))
    except OSError:
        return None
    match = RUN_DIR.match(target)
    return match.group(1) if match else None


def write_manifest(output_dir: str, manifest: dict) -> str:
    """Publish the manifest of an output directory, create-only; returns its path.

    The same bytes there already (a retried step) are fine; another manifest is a ConcurrentRunError.
    """
    path = manifest_path(output_dir)
    text = serialize(manifest)
    try:
        publish_text(path, text, create_only=True)
    except FileExistsError:
        existing = read_bytes(path).decode("utf-8", "replace")
        if existing != text:
            try:
                other = json.loads(existing).get("run_id", "unknown")
            except ValueError:
                other = "unknown"
            mine = f"{redact_url(output_dir).rstrip('/')}/{run_dir(manifest.get('run_id', ''))}/"
            raise ConcurrentRunError(
                f"{redact_url(path)}: another run (run {other}) wrote its manifest first. This run's files "
                f"stay in {mine} (remove them, or the next --overwrite run will)"
            ) from None
    return path
