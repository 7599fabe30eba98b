"""`--overwrite` removes exactly what the previous manifest lists, our temporary files and what killed
or failed runs left in their own run directories; anything else makes it refuse, listing what it
found, and then nothing at all is removed. On a local disk and on S3 alike.
"""

from __future__ import annotations

import json
import os
import posixpath

import fsspec
import pytest
from fault_helpers import IN_MEMORY, MODEL, command, problem_lines, small_corpus

from pipeline.cli import run
from pipeline.io import outputs

COMMITTED = "0123456789abcdef"
KILLED = "fedcba9876543210"
LISTED = [f"run-{COMMITTED}/train-00000-of-00002.tfrecord", f"run-{COMMITTED}/train-00001-of-00002.tfrecord",
          f"run-{COMMITTED}/dead_letters/train-00003-00000.jsonl"]
OURS_UNLISTED = [
    "." + "manifest.json.tmp-" + "a" * 32,  # a manifest being published when a run was killed
    f"run-{COMMITTED}/.train-00000-of-00002.tfrecord.tmp-" + "b" * 32,  # a retried attempt's temp file
    ".spill.tmp-" + "c" * 32 + "/0f1e2d3c4b5a69788796a5b4c3d2e1f0.records",  # a killed run's spill file
    f"run-{KILLED}/train-00000-of-00005.tfrecord",  # a killed run's shard
    f"run-{KILLED}/dead_letters/train-00000-00001.jsonl",  # a failed run's dead letters
    "dataset_info.json",  # derived from a manifest (TFDS's metadata): left by an interrupted --overwrite
    "features.json",
]
NOT_OURS = [
    "notes.txt",
    "train-00000-of-00002.tfrecord",  # named like a shard, listed by no manifest
    "dead_letters/mine.jsonl",  # under a folder named like ours
    f"run-{COMMITTED}/train-00009-of-00010.tfrecord",  # our name, in the committed run, but not listed
    f"run-{COMMITTED}/README.md",
    f"run-{KILLED}/my-analysis.parquet",  # in a killed run's directory, not a name we write
]


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    """(URL of an output directory, its filesystem, path) on a local disk or the loopback S3 server."""
    if request.param == "local":
        return str(tmp_path / "out"), fsspec.filesystem("file"), str(tmp_path / "out")
    fs, _, bucket = request.getfixturevalue("s3")
    name = f"{bucket}/out-{request.node.name.replace('[', '-').replace(']', '')}"
    return f"s3://{name}", fs, name


def populate(fs, root: str, names: list[str]) -> None:
    manifest = {"format": "pile-token-shards", "run_id": COMMITTED, "shards": [{"path": p} for p in LISTED[:2]],
                "dead_letters": {"files": [{"path": LISTED[2]}]}}
    for name, data in [("manifest.json", json.dumps(manifest).encode()), *((n, b"x") for n in names)]:
        path = posixpath.join(root, name)
        if fs.protocol == "file" or "file" in fs.protocol:
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
        fs.pipe_file(path, data)


def listing(fs, root: str) -> list[str]:
    fs.invalidate_cache()
    return sorted(posixpath.relpath(p, root) for p in fs.find(root))


@pytest.mark.slow
@pytest.mark.parametrize("background", [False, True])
def test_overwrite_removes_exactly_the_listed_and_our_temporary_files(where, background):
    url, fs, root = where
    populate(fs, root, LISTED + OURS_UNLISTED)
    removal = outputs.prepare_output_dir(url, overwrite=True, background=background)
    if background and not url.startswith("s3://"):
        # Gone at once: everything directly in the directory, the manifest first; the rest while the job runs.
        assert not any("/" not in rel for rel in listing(fs, root))
        assert removal.wait() == []
    else:
        assert removal is None  # on S3, or asked to: all removed before prepare_output_dir returns
    assert listing(fs, root) == []
    if not url.startswith("s3://"):
        assert os.listdir(root) == []  # the emptied folders of ours too


def test_a_file_the_background_removal_cannot_remove_is_reported_and_the_rest_go(tmp_path, monkeypatch, caplog):
    from pipeline.beam import launch

    fs, root = fsspec.filesystem("file"), str(tmp_path / "out")
    populate(fs, root, LISTED + OURS_UNLISTED)
    stuck = os.path.join(root, LISTED[0])
    unlink = os.unlink

    def refusing(path, *args, **kwargs):
        if os.fspath(path) == stuck:  # as a read-only folder refuses anyone but root
            raise PermissionError(13, "Permission denied")
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refusing)
    failed = outputs.prepare_output_dir(root, overwrite=True, background=True).wait()
    assert failed == [f"{LISTED[0]}: Permission denied"]
    assert listing(fs, root) == [LISTED[0]]
    launch.report_removal(root, failed)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("--overwrite: 1 file(s) of the previous output in ") and LISTED[0] in warning


@pytest.mark.slow
def test_the_command_replaces_an_output_and_leaves_nothing_of_the_old_one(tmp_path):
    out = tmp_path / "out"
    inputs = small_corpus(tmp_path / "in", files=1, docs=40)
    args = ["--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32", *IN_MEMORY]
    first = run.main(args)
    second = run.main([*args, "--overwrite"])
    assert second["run_id"] != first["run_id"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run-")) == [f"run-{second['run_id']}"]
    # The same bytes, under the new run's directory.
    assert [s["sha256"] for s in second["shards"]] == [s["sha256"] for s in first["shards"]]


@pytest.mark.slow
@pytest.mark.parametrize("foreign", NOT_OURS)
def test_overwrite_refuses_anything_else_and_then_removes_nothing(where, foreign):
    url, fs, root = where
    populate(fs, root, LISTED + OURS_UNLISTED + [foreign])
    before = listing(fs, root)
    with pytest.raises(FileExistsError, match="--overwrite refused: .* holds 1 file\\(s\\) or folder\\(s\\) that no "
                                              f"output of this pipeline lists: {foreign}\\. .*nothing was removed"):
        outputs.prepare_output_dir(url, overwrite=True)
    assert listing(fs, root) == before


@pytest.mark.slow
def test_everything_unknown_is_listed_at_once(where):
    url, fs, root = where
    populate(fs, root, LISTED + NOT_OURS)
    with pytest.raises(FileExistsError) as refused:
        outputs.prepare_output_dir(url, overwrite=True)
    assert f"holds {len(NOT_OURS)} file(s)" in str(refused.value)
    assert all(name in str(refused.value) for name in NOT_OURS)


def test_an_empty_folder_of_the_user_is_refused_too(tmp_path):
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="lists: keep/"):
        outputs.prepare_output_dir(str(out), overwrite=True)
    assert (out / "keep").is_dir()


def test_an_unreadable_manifest_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("{not json")
    (out / f"run-{COMMITTED}").mkdir()
    (out / f"run-{COMMITTED}" / "train-00000-of-00001.tfrecord").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="manifest.json \\(unreadable or not ours, so what it lists is unknown"):
        outputs.prepare_output_dir(str(out), overwrite=True)


def test_an_output_of_the_flat_layout_is_refused(tmp_path):
    """A manifest without a run id lists files outside any run directory: nothing tells them from a user's."""
    out = tmp_path / "out"
    (out / "dead_letters").mkdir(parents=True)
    flat = ["train-00000-of-00001.tfrecord", "dead_letters/train-00000-00000.jsonl"]
    for name in flat:
        (out / name).write_bytes(b"x")
    (out / "manifest.json").write_text(json.dumps({"format": "pile-token-shards", "shards": [{"path": flat[0]}],
                                                   "dead_letters": {"files": [{"path": flat[1]}]}}))
    with pytest.raises(FileExistsError, match="not a manifest of this pipeline: no run id"):
        outputs.prepare_output_dir(str(out), overwrite=True)
    kept = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert kept == sorted(["dead_letters", "manifest.json", *flat])


def _refused_and_kept(url, fs, root, why):
    before = listing(fs, root)
    with pytest.raises(FileExistsError, match=f"--overwrite refused: .*manifest.json \\(unreadable or not ours.*{why}.*"
                                              "nothing was removed"):
        outputs.prepare_output_dir(url, overwrite=True)
    assert listing(fs, root) == before


@pytest.mark.slow
def test_a_foreign_manifest_naming_a_users_file_removes_nothing(where):
    """An unrelated `manifest.json` beside a user's file: neither is ours, both stay."""
    url, fs, root = where
    if url == root:
        os.makedirs(root)
    fs.pipe_file(posixpath.join(root, "thesis.tex"), b"\\documentclass{article}")
    fs.pipe_file(posixpath.join(root, "manifest.json"), json.dumps({"shards": [{"path": "thesis.tex"}]}).encode())
    _refused_and_kept(url, fs, root, "no format marker of ours")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["shards", "dead_letters", "provenance"])
@pytest.mark.parametrize("stranger", ["thesis.tex", f"run-{COMMITTED}/thesis.tex",
                                      f"run-{KILLED}/train-00000-of-00005.tfrecord", f"run-{COMMITTED}/../thesis.tex"])
def test_a_manifest_of_ours_listing_a_file_not_its_runs_own_removes_nothing(where, key, stranger):
    """Our own manifest, edited: a user's file added to its shards, dead letters or provenance files."""
    url, fs, root = where
    populate(fs, root, LISTED + [stranger])
    manifest = json.loads(fs.cat_file(posixpath.join(root, "manifest.json")))
    entries = manifest["shards"] if key == "shards" else manifest.setdefault(key, {}).setdefault("files", [])
    entries.append({"path": stranger})
    fs.pipe_file(posixpath.join(root, "manifest.json"), json.dumps(manifest).encode())
    _refused_and_kept(url, fs, root, "it lists files that are not its run's own")


@pytest.mark.slow
def test_the_command_refuses_one_line_and_keeps_the_previous_output(tmp_path):
    out = tmp_path / "out"
    inputs = small_corpus(tmp_path / "in", files=1, docs=40)
    first = run.main(["--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                      *IN_MEMORY])
    (out / "dead_letters").mkdir()
    (out / "dead_letters" / "mine.jsonl").write_text("{}")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    proc = command("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   "--overwrite", *IN_MEMORY)
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert "--overwrite refused" in line and "dead_letters/mine.jsonl" in line
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert json.loads((out / "manifest.json").read_text()) == first


@pytest.mark.parametrize("target", ["/etc", "../elsewhere", "run-not-a-run-id", None])
def test_a_latest_that_is_not_our_link_is_refused(tmp_path, target):
    """An output directory holding only a foreign `latest` symlink was silently replaced."""
    out = tmp_path / "out"
    out.mkdir()
    if target is None:
        (out / "latest").write_text("a file of the user's")
    else:
        (out / "latest").symlink_to(target)
    with pytest.raises(FileExistsError, match="lists: latest\\. .*nothing was removed"):
        outputs.prepare_output_dir(str(out), overwrite=True)
    assert os.path.lexists(out / "latest")


def test_tfds_metadata_beside_no_run_of_ours_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "dataset_info.json").write_text("{}")  # a TFDS dataset of the user's, say
    with pytest.raises(FileExistsError, match="lists: dataset_info.json"):
        outputs.prepare_output_dir(str(out), overwrite=True)
    assert (out / "dataset_info.json").exists()


def test_our_latest_link_to_a_run_directory_is_removed(tmp_path):
    out = tmp_path / "out"
    (out / f"run-{KILLED}").mkdir(parents=True)
    (out / f"run-{KILLED}" / "train-00000-of-00001.tfrecord").write_bytes(b"x")
    (out / "latest").symlink_to(f"run-{KILLED}")
    outputs.prepare_output_dir(str(out), overwrite=True)
    assert not os.path.lexists(out / "latest") and not os.listdir(out)


@pytest.mark.slow
def test_the_command_refuses_a_foreign_latest_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "latest").symlink_to(str(tmp_path))
    proc = command("--input", small_corpus(tmp_path / "in", files=1, docs=5), "--output_dir", str(out),
                   "--tokenizer_model", MODEL, "--overwrite", *IN_MEMORY)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert "--overwrite refused" in line and "latest" in line
    assert os.path.islink(out / "latest")


def test_megatrons_dataset_cache_inside_the_output_is_named_in_the_refusal(tmp_path):
    """GPTDataset without --data-cache-path writes <prefix>/cache/GPTDataset_indices/ into the run's folder."""
    url = str(tmp_path / "out")
    fs = fsspec.filesystem("file")
    cache = f"run-{COMMITTED}/train-00000-of-00002/cache/GPTDataset_indices/"
    names = [cache + "0f6c2e6f9a3d4b1c8e7f6a5b4c3d2e1f-GPTDataset-train-" + part
             for part in ("description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy")]
    populate(fs, url, LISTED + names)
    before = listing(fs, url)
    with pytest.raises(FileExistsError) as refused:
        outputs.prepare_output_dir(url, overwrite=True)
    message = str(refused.value)
    assert "holds 4 file(s)" in message and cache in message and "\n" not in message
    assert "4 of them are Megatron's dataset cache" in message and "--data-cache-path" in message
    assert listing(fs, url) == before
    populate(fs, url, LISTED + ["notes.txt"])  # anything else: no word of Megatron
    fs.rm(str(tmp_path / "out" / f"run-{COMMITTED}" / "train-00000-of-00002"), recursive=True)
    with pytest.raises(FileExistsError) as refused:
        outputs.prepare_output_dir(url, overwrite=True)
    assert "Megatron" not in str(refused.value) and "notes.txt" in str(refused.value)
