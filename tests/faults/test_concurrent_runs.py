"""Two runs into one output never leave an output a reader accepts unless it is exactly one run's.

How (pipeline/io/lock.py, pipeline/io/outputs.py): a lock taken before anything is removed or
written (flock on disks and EFS; a create-only object on S3); every run writes into its own
`run-<id>/` directory; the manifest is written create-only (`link` locally, `If-None-Match: *` on
S3) and lists only the run's own files, which a reader checks (pipeline/format/manifest.py).

The interleavings are made exact by freezing the first job (SIGSTOP to its process group: the
driver and its Beam workers) at a chosen point, running the second to its end, then letting the
first go on. "Exactly one run's output" means: the reader accepts it with every shard's sha256
checked, and its shards (names, record counts, sizes, sha256) are those of a run of that config
alone. Moto's server honours `If-None-Match: *` on PUT and on completing a multipart upload
(checked here); it checks, then writes, under no lock, so two requests in the same instant could
both pass there, which S3 itself does not allow.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus_helpers import run_free
from fault_helpers import (
    IN_MEMORY,
    MODEL,
    PROCESSES,
    Job,
    accepted,
    command,
    command_env,
    problem_lines,
    run_id_of,
    small_corpus,
)

from pipeline.cli import run
from pipeline.format.manifest import ManifestError, load_manifest, serialize
from pipeline.io import outputs
from pipeline.io.lock import LOCK_NAME, OutputLock, OutputLockedError
from pipeline.io.publish import publish_text

pytestmark = pytest.mark.slow
FLAGS = ["--seq_len", "128", "--shard_size_mb", "0.01"]  # dozens of shards: time to freeze a run between them
SEEDS = {"A": "1", "B": "2"}  # two configs whose outputs differ in every shard


def argv(inputs: str, out: str, name: str, *extra: str) -> list[str]:
    return ["--input", inputs, "--output_dir", out, "--tokenizer_model", MODEL, *FLAGS, "--seed", SEEDS[name], *extra]


def content(manifest: dict) -> dict:
    """What makes an output one run's: its shards (names, records, bytes, sha256) and totals."""
    return run_free({"shards": manifest["shards"], "totals": manifest["totals"]})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    return small_corpus(tmp_path_factory.mktemp("corpus"), files=2, docs=1000)


@pytest.fixture(scope="module")
def references(corpus, tmp_path_factory) -> dict[str, dict]:
    """The output of each config run alone (any runner gives the same bytes)."""
    refs = {}
    for name in SEEDS:
        out = tmp_path_factory.mktemp(f"ref{name}") / "out"
        refs[name] = content(run.main(argv(corpus, str(out), name, *IN_MEMORY)))
    assert len(refs["A"]["shards"]) > 20
    assert refs["A"]["shards"] != refs["B"]["shards"]
    return refs


def only_output_of(out: str, references: dict, name: str) -> None:
    """`out` is exactly run `name`'s complete output, as the reader sees it."""
    manifest = accepted(out)
    assert manifest is not None, f"the reader refuses {out}"
    assert content(manifest) == references[name]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# Local disk: the second run fails at once and removes nothing, not even the first run's spill files.
@pytest.mark.parametrize("first,first_flags,second,second_flags", [
    ("A", [], "B", []),
    ("A", [], "B", ["--overwrite"]),
    ("B", ["--overwrite"], "A", []),
    ("B", ["--overwrite"], "A", ["--overwrite"]),
])
def test_a_second_local_run_fails_at_once_and_touches_nothing(tmp_path, corpus, references, first, first_flags,
                                                              second, second_flags):
    out = tmp_path / "out"
    job = Job(*argv(corpus, str(out), first, *first_flags, *PROCESSES))
    try:
        # Frozen mid-job: its workers have spilled records to files in the output directory.
        job.wait_until(lambda: any(p.is_file() for p in out.glob(".spill.tmp-*/*")), "records were spilled")
        job.freeze()
        before = snapshot(out)
        second_run = command(*argv(corpus, str(out), second, *second_flags, *IN_MEMORY))
        assert snapshot(out) == before  # nothing removed, nothing written: the spill files are intact
    finally:
        job.thaw()
    assert second_run.returncode == 2
    (line,) = problem_lines(second_run.stderr)
    assert f"--output_dir {out} is being written by another run (run {run_id_of(job.output())}, pid " in line
    assert job.finish() == 0, job.output()[-3000:]
    only_output_of(str(out), references, first)
    assert sorted(os.listdir(out)) == ["dataset_info.json", "features.json", "manifest.json",
                                       f"run-{run_id_of(job.output())}"]  # no lock, no temp


def test_two_local_runs_started_together(tmp_path, corpus, references):
    """No freezing: both start at once, with --overwrite, over a previous output."""
    out = tmp_path / "out"
    run.main(argv(corpus, str(out), "A", *IN_MEMORY))
    jobs = {name: Job(*argv(corpus, str(out), name, "--overwrite", *IN_MEMORY)) for name in ("B", "A")}
    codes = {name: job.finish() for name, job in jobs.items()}
    assert 0 in codes.values(), {n: j.output()[-2000:] for n, j in jobs.items()}
    for name, job in jobs.items():
        if codes[name]:
            assert len(problem_lines(job.output())) == 1, job.output()[-3000:]
    manifest = accepted(str(out))
    winner = next(n for n, job in jobs.items() if run_id_of(job.output()) == manifest["run_id"])
    assert codes[winner] == 0
    only_output_of(str(out), references, winner)


# S3: no locks there, so each interleaving that --overwrite allows is played out.
@pytest.fixture(scope="module")
def s3_inputs(s3, corpus):
    fs, env, bucket = s3
    for path in sorted(Path(corpus).parent.glob("*.jsonl.zst")):
        fs.put_file(str(path), f"{bucket}/pile/{path.name}")
    return f"s3://{bucket}/pile/*.jsonl.zst"


def s3_out(s3, name: str) -> tuple[str, str]:
    """(URL, bucket/key prefix) of a new output."""
    _, _, bucket = s3
    return f"s3://{bucket}/{name}", f"{bucket}/{name}"


def exists(fs, path: str) -> bool:
    fs.invalidate_cache()
    return fs.exists(path)


def shard_objects(fs, prefix: str, run_id: str = "") -> list[str]:
    """The shards under `prefix`, of run `run_id` or of any run."""
    fs.invalidate_cache()
    return [p for p in fs.find(prefix) if f"/run-{run_id}" in p and p.endswith(".tfrecord")]


@pytest.mark.parametrize("first,second", [("A", "B"), ("B", "A")])
def test_s3_second_run_without_overwrite_fails_at_once(s3, s3_inputs, references, first, second):
    fs, env, _ = s3
    url, prefix = s3_out(s3, f"plain-{first}")
    job = Job(*argv(s3_inputs, url, first, *IN_MEMORY), env=env)
    try:
        job.wait_until(lambda: exists(fs, f"{prefix}/{LOCK_NAME}"), "the first run took the lock")
        job.freeze()
        second_run = command(*argv(s3_inputs, url, second, *IN_MEMORY), env=env)
    finally:
        job.thaw()
    assert second_run.returncode == 2
    (line,) = problem_lines(second_run.stderr)
    assert f"--output_dir {url} is locked by run " in line and "if no run is writing, pass --overwrite" in line
    assert job.finish() == 0, job.output()[-3000:]
    only_output_of(url, references, first)
    assert not exists(fs, f"{prefix}/{LOCK_NAME}")  # released


# A and B differ only in their seed, so which runs first is the same interleaving: each freeze point
# is run once, and the two points take the two orders.
@pytest.mark.parametrize(("freeze_at", "first", "second"), [("lock", "A", "B"), ("shards", "B", "A")])
def test_s3_overwrite_while_another_run_writes(s3, s3_inputs, references, first, second, freeze_at):
    """The second run, told --overwrite, replaces the lock (and removes the first run's unfinished
    files) and wins; the first, let go on, fails. Never a mix."""
    fs, env, _ = s3
    url, prefix = s3_out(s3, f"over-{freeze_at}-{first}")
    job = Job(*argv(s3_inputs, url, first, *IN_MEMORY), env=env)
    try:
        if freeze_at == "lock":
            job.wait_until(lambda: exists(fs, f"{prefix}/{LOCK_NAME}"), "the first run took the lock")
        else:
            job.wait_until(lambda: shard_objects(fs, prefix), "the first run wrote a shard")
        job.freeze()
        assert not exists(fs, f"{prefix}/manifest.json"), "the first run finished before it was frozen"
        second_run = command(*argv(s3_inputs, url, second, "--overwrite", *IN_MEMORY), env=env)
        assert second_run.returncode == 0, second_run.stderr[-3000:]
        only_output_of(url, references, second)
        if freeze_at == "shards":  # the first run's unfinished files were removed
            assert run_id_of(job.output()) and shard_objects(fs, prefix, run_id_of(job.output())) == []
    finally:
        job.thaw()
    code = job.finish()
    lines = problem_lines(job.output())
    assert len(lines) == 1, job.output()[-3000:]
    # Let go on, the first run fails at whichever check comes next: the output directory's (frozen
    # before it), the create-only manifest, or (frozen between uploading a shard and checking it)
    # that shard's.
    expected = {2: [f"--output_dir {url} is not empty (a finished output"],
                1: [f"another run (run {run_id_of(second_run.stderr)}) wrote its manifest first",
                    "removed right after it was uploaded (by another run with --overwrite?)"]}
    assert any(message in lines[0] for message in expected.get(code, [])), (code, lines[0])
    if freeze_at == "shards":
        assert code == 1
    only_output_of(url, references, second)


def test_s3_overwrite_that_removes_files_of_a_run_about_to_commit(s3, s3_inputs, references):
    """The worst order: B (--overwrite) removes A's unfinished shards, then A goes on before B commits.

    A always fails, naming what happened. Either A was frozen between uploading a shard and checking
    it (it finds it removed, writes no manifest, and B then wins), or A writes its manifest and finds
    shards it lists gone (it says so; the reader refuses the output; B, finding A's manifest, fails
    too). Nothing but exactly one run's output is ever accepted.
    """
    fs, env, _ = s3
    url, prefix = s3_out(s3, "worst")
    a = Job(*argv(s3_inputs, url, "A", *IN_MEMORY), env=env)
    try:
        a.wait_until(lambda: shard_objects(fs, prefix), "A wrote a shard")
        a.freeze()
        assert not exists(fs, f"{prefix}/manifest.json"), "A finished before it was frozen"
        b = Job(*argv(s3_inputs, url, "B", "--overwrite", *IN_MEMORY), env=env)
        try:
            b.wait_until(lambda: not shard_objects(fs, prefix), "B removed A's unfinished files")
            b.freeze()
            assert not exists(fs, f"{prefix}/manifest.json"), "B finished before it was frozen"
            a.thaw()
            assert a.finish() == 1, a.output()[-3000:]
        finally:
            b.thaw()
    finally:
        a.thaw()
    b_code = b.finish()
    (a_line,) = problem_lines(a.output())
    if "removed right after it was uploaded" in a_line:
        assert b_code == 0, b.output()[-3000:]
        only_output_of(url, references, "B")
    else:
        assert "file(s) of this run are gone or changed since they were written" in a_line
        assert b_code == 1
        (b_line,) = problem_lines(b.output())
        assert f"another run (run {run_id_of(a.output())}) wrote its manifest first" in b_line
        assert accepted(url) is None


# The pieces, one at a time.
@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_manifest_is_written_create_only(tmp_path, s3, where):
    """Moto and local disks both refuse to replace it; the same bytes again (a retried step) succeed."""
    fs, _, _ = s3
    out = str(tmp_path / "out") if where == "local" else s3_out(s3, "create-only")[0]
    manifest = {"run_id": "0123456789abcdef", "shards": [], "dead_letters": {"files": [], "records": 0,
                "by_reason": {}}, "totals": {"records": 1, "lines": 1}, "subsets": {}}
    assert outputs.commit_output(out, manifest, 0.0).endswith("manifest.json")
    assert outputs.commit_output(out, manifest, 0.0)  # a retry of the same step: the same bytes
    with pytest.raises(FileExistsError):
        publish_text(posixpath.join(out, "manifest.json"), "{}", create_only=True)
    other = dict(manifest, run_id="fedcba9876543210")
    with pytest.raises(outputs.ConcurrentRunError, match="another run \\(run 0123456789abcdef\\) wrote its manifest"):
        outputs.commit_output(out, other, 0.0)
    if where == "s3":
        assert json.loads(fs.cat_file(out.removeprefix("s3://") + "/manifest.json")) == manifest
    else:
        assert Path(out, "manifest.json").read_text() == serialize(manifest)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_commit_checks_that_every_file_it_lists_is_there(tmp_path, s3, where):
    fs, _, _ = s3
    out = str(tmp_path / "out") if where == "local" else s3_out(s3, "check-listed")[0]
    shard = "run-0123456789abcdef/train-00000-of-00001.tfrecord"
    publish_text(posixpath.join(out, shard), "records")
    manifest = {"run_id": "0123456789abcdef", "shards": [{"path": shard, "bytes": 7}],
                "dead_letters": {"files": [], "records": 0, "by_reason": {}}, "totals": {"records": 1, "lines": 1},
                "subsets": {}}
    (fs if where == "s3" else fsspec_local()).rm(posixpath.join(out.removeprefix("s3://"), shard))
    with pytest.raises(outputs.ConcurrentRunError, match="1 file\\(s\\) of this run are gone or changed.*train-00000"):
        outputs.commit_output(out, manifest, 0.0)


def fsspec_local():
    import fsspec

    return fsspec.filesystem("file")


def test_the_local_lock_excludes_even_this_process_and_dies_with_its_holder(tmp_path):
    out = str(tmp_path / "out")
    lock = OutputLock.acquire(out, "0123456789abcdef", overwrite=False)
    with pytest.raises(OutputLockedError, match="run 0123456789abcdef, pid"):
        OutputLock.acquire(out, "fedcba9876543210", overwrite=True)
    lock.release()
    assert os.listdir(out) == []
    # A holder killed with SIGKILL leaves the file behind, but not the lock.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pipeline.io.lock import OutputLock\n"
                               "OutputLock.acquire(sys.argv[1], 'dddddddddddddddd', False)\ntime.sleep(600)", out],
                              env=command_env())
    try:
        deadline = time.monotonic() + 60
        while "dddddddddddddddd" not in (Path(out, LOCK_NAME).read_text() if Path(out, LOCK_NAME).exists() else ""):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        with pytest.raises(OutputLockedError, match="run dddddddddddddddd"):
            OutputLock.acquire(out, "0123456789abcdef", overwrite=False)
    finally:
        holder.kill()
        holder.wait()
    assert Path(out, LOCK_NAME).exists()
    OutputLock.acquire(out, "0123456789abcdef", overwrite=False).release()


def test_the_reader_refuses_shards_that_are_not_the_manifests_own(tmp_path):
    out = tmp_path / "out"
    manifest = run.main(argv(small_corpus(tmp_path), str(out), "A", "--shard_size_mb", "0.01", *IN_MEMORY))
    other = "fedcba9876543210"
    (out / f"run-{other}").mkdir()
    shard = manifest["shards"][0]
    os.link(out / shard["path"], out / f"run-{other}" / Path(shard["path"]).name)
    tampered = dict(manifest, shards=[dict(shard, path=f"run-{other}/{Path(shard['path']).name}"),
                                      *manifest["shards"][1:]])
    (out / "manifest.json").write_text(serialize(tampered))
    with pytest.raises(ManifestError, match=f"not in run-{manifest['run_id']}/.*not its own"):
        load_manifest(str(out))
    assert accepted(str(out)) is None
