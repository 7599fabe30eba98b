"""What decides a job's output bytes, as one JSON object and its digest: what a resumed run must share.

A work item's committed result (pipeline/io/workfolder.py) is a function of its input bytes and of
everything here: every option but those that never change a byte (`FREE`: where the output goes,
how the work is spread, --resume itself, the dead-letter share that only decides whether the
manifest is written), the stages' options in full, each input's and eval set's snapshot (size,
modification time, inode; size and ETag on object stores), the files the stages' options name,
the tokenizer's sha256, special ids and backend, and the code's versions (the output's version,
pipeline/core/versions.py, the formats' and the work items'). A resume is refused unless all of it
is the same: `what_differs` names the first difference in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from pipeline.config.execution import ExecutionOptions
from pipeline.config.job import PipelineConfig
from pipeline.core.options import options_of
from pipeline.core.versions import OUTPUT_VERSION, created_by
from pipeline.format import manifest as manifest_format
from pipeline.format import megatron as megatron_format
from pipeline.io.snapshot import describe_change, snapshot
from pipeline.io.urls import redact_url
from pipeline.process.result import MAGIC as RESULT_MAGIC
from pipeline.tokenize.model import TokenizerSpec

WORK_VERSION = 1  # the layout of committed work items (pipeline/process/commit.py)
# Options that never change a byte of the output: where it goes, how the work spreads, resuming.
FREE = {"output_dir", "overwrite", "resume", "max_dead_letter_fraction",
        *(field.name for field, _ in options_of(ExecutionOptions))}
MAX_FOLDER_FILES = 256  # files of a folder a stage's option names, snapshotted (a model's folder)


def _plain(value):
    """A value as JSON holds it, the same for equal values on every run."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=json.dumps) if isinstance(value, set | frozenset) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **_plain(dataclasses.asdict(value))}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _named_files(values) -> dict:
    """{path: snapshot} of the local files (or a folder's files) the strings among `values` name."""
    out = {}
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, list | tuple):
            stack.extend(value)
            continue
        if not isinstance(value, str) or not value or "://" in value:
            continue
        if os.path.isfile(value):
            out[os.path.abspath(value)] = list(snapshot(value))
        elif os.path.isdir(value):
            for root, _, names in sorted(os.walk(value)):
                for name in sorted(names)[:MAX_FOLDER_FILES]:
                    path = os.path.join(root, name)
                    out[os.path.abspath(path)] = list(snapshot(path))
    return dict(sorted(out.items()))


def job_facts(config: PipelineConfig, snapshots, eval_files: tuple[str, ...], tokenizer: TokenizerSpec) -> dict:
    """Everything that decides the output's bytes (module docstring), JSON-ready.

    `snapshots`: (path, snapshot) of every input at launch (pipeline/io/snapshot.py).
    """
    options = {field.name: _plain(getattr(config, field.name)) for field, _ in options_of(type(config))
               if field.name not in FREE}
    stages = {name: _plain(config.options_of_stage(name)) for name in config.stage_names()}
    special = tokenizer.special
    return {
        "code": {"package": created_by(), "output_version": OUTPUT_VERSION, "work_items": WORK_VERSION,
                 "result": RESULT_MAGIC.decode(), "tfrecord_manifest": manifest_format.FORMAT_VERSION,
                 "megatron": megatron_format.FORMAT_VERSION},
        "options": options,
        "stages": stages,
        "inputs": [[path, list(snap)] for path, snap in snapshots],
        "eval_sets": [[path, list(snapshot(path))] for path in eval_files],
        "files": _named_files(list(stages.values())),
        "tokenizer": {"sha256": tokenizer.sha256, "kind": tokenizer.kind, "backend": tokenizer.backend.name,
                      "backend_version": tokenizer.backend.version, "special": _plain(special)},
    }


def digest(facts: dict) -> str:
    """The facts' digest: what every committed item of the job carries."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def _shown(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _files_differ(what: str, before: list, now: list) -> str | None:
    """The first input (or eval set) added, gone or changed, in words."""
    old, new = dict((p, tuple(s)) for p, s in before), dict((p, tuple(s)) for p, s in now)
    for path in new:
        if path not in old:
            return f"{what} {redact_url(path)} is new"
    for path in old:
        if path not in new:
            return f"{what} {redact_url(path)} is no longer among them"
    if list(old) != list(new):
        return f"the {what}s are in another order"
    for path, snap in new.items():
        if snap != old[path]:
            return f"{what} {redact_url(path)} changed since the run ({describe_change(old[path], snap)})"
    return None


def what_differs(before: dict, now: dict) -> str | None:
    """The first thing that differs between a work folder's facts and this run's, in one line; None if nothing."""
    for key, value in now.get("code", {}).items():
        if before.get("code", {}).get(key) != value:
            return (f"the code's output differs ({key}: {_shown(before.get('code', {}).get(key))} then, "
                    f"{_shown(value)} now)")
    old, new = before.get("options", {}), now.get("options", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            return f"--{name} was {_shown(old.get(name))}, now {_shown(new.get(name))}"
    for name in sorted(set(before.get("stages", {})) | set(now.get("stages", {}))):
        if before.get("stages", {}).get(name) != now.get("stages", {}).get(name):
            return f"the options of stage {name} differ"
    for key, what in (("inputs", "input"), ("eval_sets", "--decontaminate file")):
        found = _files_differ(what, before.get(key, []), now.get(key, []))
        if found:
            return found
    found = _files_differ("file", list(before.get("files", {}).items()), list(now.get("files", {}).items()))
    if found:
        return found + " (a file a stage's option names)"
    old, new = before.get("tokenizer", {}), now.get("tokenizer", {})
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            return f"the tokenizer's {key} differs ({_shown(old.get(key))} then, {_shown(new.get(key))} now)"
    if before != now:
        return "what decides the output differs"
    return None
