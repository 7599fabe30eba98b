"""Faults at scale: SIGKILL midway, shards visible only complete (EFS/NFS semantics), no hot keys.

- A job killed with SIGKILL (the whole process group: driver and DirectRunner workers) leaves no
  manifest, so every reader refuses the output; what shards are visible are complete; a rerun
  gives exactly the bytes of a clean run (in a run directory of its own) and leaves no temp files.
- Every file (shard, dead letters, manifest) is written under a hidden temp name in its final
  directory, so the rename (for the manifest, a hard link: it never replaces a file) never crosses
  filesystems: on EFS/NFS both are atomic on the server, and a reader on another host sees the old
  name, or the complete file.
- Every GroupByKey has a bounded group: none carries more than one shard's worth of data.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus_helpers import run_free
from sample_corpus import write_sample_corpus

from pipeline.cli import run
from pipeline.format import manifest as manifest_lib
from pipeline.io import outputs, record_files
from pipeline.io.lock import LOCK_NAME

REPO = Path(__file__).resolve().parents[2]
SEQ = 128
IN_MEMORY = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{32}$")


def _is_temp(name: str) -> bool:
    """A hidden temp file, or any file in a hidden temp directory (the spill files)."""
    return any(TEMP.match(part) for part in name.split("/"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=3, docs_per_file=40)
    return root


def _argv(corpus, out, model, *extra):
    return ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", str(SEQ), "--chunk_mb", "0.05", "--shard_size_mb", "0.02", *extra]


def _files(out: Path) -> dict:
    """Every file, by its path without the run directory (TFDS's dataset_info.json, which names it, run-free)."""
    return {run_free(str(p.relative_to(out))): run_free(p.read_text()).encode() if p.name == "dataset_info.json"
            else p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _comparable(files: dict) -> dict:
    """Every file's sha256; the manifest without the fields that name the run (run id, output_dir, overwrite)."""
    out = {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    manifest = run_free(json.loads(files["manifest.json"]))
    for key in ("output_dir", "overwrite"):
        manifest["config"].pop(key, None)
    out["manifest.json"] = manifest
    return out


def _wait_for_group_gone(pgid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def clean(corpus, tiny_model, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("clean") / "out"
    run.main(_argv(corpus, out, tiny_model, *IN_MEMORY))
    return _files(out)


@pytest.mark.slow
def test_sigkill_midway_then_rerun_gives_the_clean_output(corpus, tiny_model, tmp_path, clean):
    from pipeline import tfdata

    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.run", *_argv(corpus, out, tiny_model),
         "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    seen = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            seen = [p.name for p in out.rglob("*")]
            if any(name.endswith(".tfrecord") or ".tfrecord.tmp-" in name for name in seen):
                break
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes, mid-write
        proc.wait()
        _wait_for_group_gone(proc.pid)
    assert seen, "the job was killed before it wrote anything: nothing was tested"

    killed = _files(out)
    assert "manifest.json" not in killed, "the job finished before the kill: nothing was tested"
    with pytest.raises(manifest_lib.ManifestError, match="No manifest"):
        manifest_lib.load_manifest(str(out))
    with pytest.raises(manifest_lib.ManifestError):
        tfdata.make_dataset(str(out), batch_size=2, shuffle=False)
    for name, data in killed.items():
        # Under a final name only complete shards, exactly the clean run's bytes; partial data only
        # under hidden temp names, or in a hidden temp (spill) directory: no reader opens those,
        # readers go through the manifest. (And the lock file the kernel no longer holds, and the work
        # items the run committed, each complete and checked when --resume takes it up.)
        assert (name in clean and data == clean[name] or _is_temp(name) or name == LOCK_NAME
                or name.startswith(".resume/")), name

    with pytest.raises(FileExistsError, match="did not finish.*--resume"):
        run.main(_argv(corpus, out, tiny_model, *IN_MEMORY))
    run.main(_argv(corpus, out, tiny_model, "--overwrite", *IN_MEMORY))
    again = _files(out)
    assert not [n for n in again if _is_temp(n) or n == LOCK_NAME]
    assert _comparable(again) == _comparable(clean)


@pytest.mark.slow
def test_files_are_renamed_complete_within_their_directory(corpus, tiny_model, tmp_path, monkeypatch, clean):
    """EFS/NFS semantics: temp file in the final directory (same filesystem), complete, then renamed
    (the manifest: hard-linked, which fails rather than replace a file)."""
    renames = []
    real_replace, real_link = os.replace, os.link

    def watch(src, dst):
        src, dst = os.fspath(src), os.fspath(dst)
        if str(tmp_path) in dst:
            assert os.path.dirname(src) == os.path.dirname(dst)
            assert os.stat(src).st_dev == os.stat(os.path.dirname(dst)).st_dev
            assert TEMP.match(os.path.basename(src)), src
            assert not os.path.exists(dst), f"{dst} replaced an existing file"
            with open(src, "rb") as f:
                data = f.read()
            rel = run_free(os.path.relpath(dst, tmp_path / "out"))
            renames.append((rel, run_free(data.decode()).encode() if rel == "dataset_info.json" else data))

    def watched_replace(src, dst, *args, **kwargs):
        watch(src, dst)
        return real_replace(src, dst, *args, **kwargs)

    def watched_link(src, dst, *args, **kwargs):
        watch(src, dst)
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", watched_replace)
    monkeypatch.setattr(os, "link", watched_link)
    run.main(_argv(corpus, tmp_path / "out", tiny_model, *IN_MEMORY))
    renames = [(name, data) for name, data in renames if not name.startswith(".resume/")]  # the work folder's
    published = dict(renames)
    assert len(published) == len(renames)  # each file published once
    assert set(published) == set(clean)
    # What was renamed was already complete: the bytes readers see from the first moment on.
    assert _comparable(published) == _comparable(clean)
    # The manifest after every file it lists; only TFDS's metadata, derived from it, comes later.
    names = [name for name, _ in renames]
    assert set(names[names.index("manifest.json") + 1:]) <= {"dataset_info.json", "features.json"}


def _record_groups(monkeypatch) -> dict:
    """Wrap the DoFns right after each GroupByKey to record the bytes of every group they get."""
    from pipeline.beam import chunk_documents
    from pipeline.beam.tfrecord import pack as tfrecord_pack
    from pipeline.beam.tfrecord import shards as tfrecord_shards

    groups = {"GroupByShard": [], "GroupTailsByFile": [], "GroupLastTails": [], "WriteDeadLetters/GroupByPart": []}

    def piece_bytes(piece):
        return piece.labels.nbytes + piece.starts.nbytes

    write_shard, pack_tails = tfrecord_shards.WriteShardFn.process, tfrecord_pack.PackTailsFn.process
    pack_final, write_dead = tfrecord_pack.PackFinalFn.process, chunk_documents.WriteDeadLettersFn.process

    def shard(self, element, plan):
        # The records a group stands for (through spill files on DirectRunner, where a block split
        # between shards goes to each whole with the indices of the shard's records): what the
        # writer reads.
        members = [tfrecord_shards.shard_members(placement, recs)[1] for placement, recs in element[1]]
        groups["GroupByShard"].append(sum(len(record_files.load(recs).data) for recs in members))
        return write_shard(self, element, plan)

    def tails(self, element):
        groups["GroupTailsByFile"].append(sum(piece_bytes(piece) for _, piece in element[1]))
        return pack_tails(self, element)

    def final(self, element):
        groups["GroupLastTails"].append(sum(piece_bytes(piece) for _, piece in element[1]))
        return pack_final(self, element)

    def dead(self, element):
        groups["WriteDeadLetters/GroupByPart"].append(sum(len(lines) for _, lines in element[1]))
        return write_dead(self, element)

    monkeypatch.setattr(tfrecord_shards.WriteShardFn, "process", shard)
    monkeypatch.setattr(tfrecord_pack.PackTailsFn, "process", tails)
    monkeypatch.setattr(tfrecord_pack.PackFinalFn, "process", final)
    monkeypatch.setattr(chunk_documents.WriteDeadLettersFn, "process", dead)
    return groups


@pytest.mark.slow
def test_no_group_carries_more_than_one_shard(corpus, tiny_model, tmp_path, monkeypatch):
    """The bound of every GroupByKey, measured on a run with many chunks, files, epochs and shards.

    GroupByShard: one shard (<= shard_size_mb + one record, by the shard plan). GroupTailsByFile: one
    remainder (< seq_len tokens) per chunk of one (copy, file). GroupLastTails: one remainder per
    (copy, file) of the whole job. WriteDeadLetters/GroupByPart: see below.
    """
    groups = _record_groups(monkeypatch)
    shard_mb = 0.02
    manifest = run.main(_argv(corpus, tmp_path / "out", tiny_model, "--epochs", "Books3=2,Wikipedia (en)=1.5",
                              *IN_MEMORY))
    shard_bytes = shard_mb * (1 << 20)
    record = max(s["bytes"] / s["records"] for s in manifest["shards"])
    chunks = {i["path"]: i["chunks"] for i in manifest["inputs"]}
    copies, files = 2, len(chunks)
    token_bytes = 5  # a remainder: int32 label + bool start per token
    assert len(groups["GroupByShard"]) == len(manifest["shards"]) > 3
    assert max(groups["GroupByShard"]) <= shard_bytes + record
    assert max(chunks.values()) > 3 and len(groups["GroupTailsByFile"]) == copies * files
    assert max(groups["GroupTailsByFile"]) <= max(chunks.values()) * SEQ * token_bytes
    assert len(groups["GroupLastTails"]) == 1
    assert groups["GroupLastTails"][0] <= copies * files * SEQ * token_bytes


@pytest.mark.slow
def test_dead_letters_of_a_garbage_file_do_not_form_a_hot_key(tiny_model, tmp_path, monkeypatch):
    from corpus_helpers import pile_line, write_lines

    from pipeline.beam import chunk_documents

    groups = _record_groups(monkeypatch)
    monkeypatch.setattr(chunk_documents, "DEAD_LETTER_SPAN", 4)
    monkeypatch.setattr(chunk_documents, "DEAD_LETTER_OWN_BYTES", 20_000)
    lines = [f"date,name,value,{i},{'x' * 80}".encode() for i in range(3000)]  # a CSV in the Pile's place
    write_lines(str(tmp_path / "in" / "00.jsonl.zst"), lines)
    # A mostly clean file with one bad line every ~1.5 chunks.
    clean = [pile_line(f"document {i} " * 30) if i % 40 else b"not json" for i in range(1200)]
    write_lines(str(tmp_path / "in" / "01.jsonl.zst"), clean)
    manifest = run.main(["--input", str(tmp_path / "in" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "out"),
                         "--tokenizer_model", tiny_model, "--chunk_mb", "0.02", "--shard_size_mb", "0.05",
                         "--max_dead_letter_fraction", "1", *IN_MEMORY])
    # A record is at most ~1 KB (prefix and detail are capped). A garbage chunk's dead letters get a
    # file of their own, so no group holds more than one chunk's (chunk_mb of lines); the few dead
    # letters of clean chunks share a file per span of chunks, so their files stay few.
    lines_per_chunk = 0.02 * (1 << 20) / min(len(line) for line in lines) + 1
    files = manifest["dead_letters"]["files"]
    in_run = {f["path"].split("/", 1)[1]: f for f in files}  # run-<id>/dead_letters/...
    garbage = [f for path, f in in_run.items() if path.startswith("dead_letters/train-00000-")]
    sparse = [f for path, f in in_run.items() if path.startswith("dead_letters/train-00001-")]
    chunks = {i["path"].rsplit("/", 1)[-1]: i["chunks"] for i in manifest["inputs"]}
    assert len(garbage) == chunks["00.jsonl.zst"] > 3 and all(f["path"].endswith("-only.jsonl") for f in garbage)
    assert 1 < len(sparse) <= -(-chunks["01.jsonl.zst"] // 4) < chunks["01.jsonl.zst"]
    assert sum(f["records"] for f in files) == manifest["dead_letters"]["records"] == 3000 + 30
    assert max(groups["WriteDeadLetters/GroupByPart"]) <= max(lines_per_chunk * 1024, 4 * 20_000)


def test_what_a_killed_job_leaves_is_ours_so_overwrite_clears_it(tmp_path):
    """Its hidden temp files, its spill files and its run directory (no manifest lists it)."""
    out = tmp_path / "out"
    killed = out / "run-0123456789abcdef"
    (out / (".spill.tmp-" + "c" * 32)).mkdir(parents=True)
    killed.mkdir()
    for path in (out / (".manifest.json.tmp-" + "b" * 32), killed / (".train-00000-of-00002.tfrecord.tmp-" + "a" * 32),
                 killed / "train-00001-of-00002.tfrecord", out / (".spill.tmp-" + "c" * 32) / "0a.records",
                 out / LOCK_NAME):
        path.write_bytes(b"partial")
    outputs.prepare_output_dir(str(out), overwrite=True)
    assert os.listdir(out) == [LOCK_NAME]  # the lock is the lock holder's to remove
