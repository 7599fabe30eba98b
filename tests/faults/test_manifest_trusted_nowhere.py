"""A manifest is read back from disk, where anyone may have edited it: `show`, `provenance` and the
reader check its whole shape once (one error type, `ManifestError`, one line from a command), and
open no file it names outside the directory of the run that wrote it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from fault_helpers import IN_MEMORY, MODEL, REPO, command_env, small_corpus

from pipeline.cli import run
from pipeline.format.manifest import ManifestError, load_manifest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A real output, with --provenance."""
    root = tmp_path_factory.mktemp("trusted")
    out = root / "out"
    run.main(["--input", small_corpus(root / "in", files=2, docs=40), "--output_dir", str(out),
              "--tokenizer_model", MODEL, "--seq_len", "32", "--provenance", *IN_MEMORY])
    return out


def _edited(written, tmp_path, edit) -> str:
    """A copy of the output whose manifest `edit(manifest)` changed (or replaced, when it returns one)."""
    out = tmp_path / "out"
    shutil.copytree(written, out)
    manifest = json.loads((out / "manifest.json").read_text())
    replaced = edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest if replaced is None else replaced))
    return str(out)


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli.main", *argv], cwd=REPO, env=command_env(),
                          capture_output=True, text=True, timeout=timeout)


def _refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line


def _set(key, value):
    def edit(m):
        m[key] = value
    return edit


SHAPES = {
    "shards null": _set("shards", None),
    "a list": lambda m: [m],
    "a string": lambda m: "manifest",
    "shard records a string": lambda m: m["shards"][0].update(records="many"),
    "shard a number": lambda m: m["shards"].__setitem__(0, 7),
    "totals null": _set("totals", None),
    "seq_len negative": _set("seq_len", -1),
    "tokenizer missing": lambda m: m.pop("tokenizer"),
    "subsets a list": _set("subsets", []),
    "shuffle seed infinite": lambda m: m["shuffle"].update(seed=float("inf")),
    "dead letters files null": lambda m: m["dead_letters"].update(files=None),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_manifest_of_the_wrong_shape_is_one_manifest_error(written, tmp_path, shape):
    out = _edited(written, tmp_path, SHAPES[shape])
    with pytest.raises(ManifestError):
        load_manifest(out)
    from pipeline import tfdata

    with pytest.raises(ManifestError):
        tfdata.make_dataset(out, batch_size=1, seed=0)


@pytest.mark.parametrize("shape", ["shards null", "a list"])
def test_show_refuses_it_in_one_line(written, tmp_path, shape):
    _refused(_cli("show", _edited(written, tmp_path, SHAPES[shape])), "manifest.json")


def test_show_does_not_hash_a_recorded_model_that_is_not_a_file(written, tmp_path):
    """The recorded tokenizer path `/dev/zero` was hashed forever."""
    out = _edited(written, tmp_path, lambda m: m["config"].update(tokenizer_model="/dev/zero"))
    start = time.monotonic()
    proc = _cli("show", out, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the recorded model /dev/zero is not reachable from here (NotAFileError)" in proc.stdout
    assert time.monotonic() - start < 120


@pytest.mark.parametrize("where", ["../outside.npz", "/etc/passwd", "run-{run}/../../outside.npz",
                                   "s3://bucket/x.npz"])
def test_provenance_opens_no_file_outside_the_run_directory(written, tmp_path, where):
    outside = tmp_path / "outside.npz"
    shutil.copy(next((written / f"run-{load_manifest(str(written))['run_id']}" / "provenance").iterdir()), outside)

    def edit(m):
        m["provenance"]["files"][0]["path"] = where.format(run=m["run_id"])

    out = _edited(written, tmp_path, edit)
    with pytest.raises(ManifestError, match="escapes the output directory"):
        load_manifest(out)
    proc = _cli("provenance", out, "--step", "0", "--global_batch_size", "2", "--seed", "1")
    _refused(proc, "escapes the output directory")


def test_provenance_files_of_another_run_are_not_its_own(written, tmp_path):
    out = _edited(written, tmp_path, lambda m: m["provenance"]["files"][0].update(
        path="run-0000000000000000/provenance/train-00000.npz"))
    _refused(_cli("provenance", out, "--step", "0", "--global_batch_size", "2", "--seed", "1"),
             "are not in run-", "not its own")


def test_the_real_manifest_passes(written):
    assert load_manifest(str(written))["provenance"]["files"]
