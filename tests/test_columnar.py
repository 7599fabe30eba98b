"""Parquet and Arrow inputs: the same shards as the same documents in JSON lines, whatever the split.

The corpus is the bundled notes corpus's rows (`body`, `source.name`: a struct column), written by
pyarrow as Parquet (several row groups), an Arrow IPC file, and a `datasets.save_to_disk` folder
(Arrow stream files with dataset_info.json and state.json, as `datasets` writes them).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus_helpers import FAST_BEAM
from s3_server import loopback_s3

from pipeline.cli import run

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "sample_data" / "notes" / "part-00.jsonl"
FLAGS = ["--text_key", "body", "--subset_key", "source.name", "--subset_names", "any", "--default_subset",
         "other", "--seq_len", "64"]
SCHEMA = pa.schema([("id", pa.string()), ("body", pa.string()), ("source", pa.struct([("name", pa.string())]))])


def save_to_disk(saved: Path, table: pa.Table) -> None:
    """`datasets`' save_to_disk layout of one split: an Arrow stream and its two JSON files."""
    saved.mkdir()
    with pa.ipc.new_stream(saved / "data-00000-of-00001.arrow", SCHEMA) as writer:
        writer.write_table(table, max_chunksize=1000)
    (saved / "dataset_info.json").write_text(json.dumps({"features": {"body": {"dtype": "string"}}}))
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                  "_fingerprint": "f", "_split": "train"}))


def _rows() -> list[dict]:
    rows = []
    for raw in NOTES.read_bytes().splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line.get("body"), str):
            source = line.get("source")
            rows.append({"id": line.get("id"), "body": line["body"],
                         "source": {"name": source.get("name")} if isinstance(source, dict) else None})
    return rows


def _shards(out: Path) -> dict[str, bytes]:
    """The token shards (not the manifest, which names the inputs)."""
    found = {p.name: p.read_bytes() for p in out.rglob("*.tfrecord*") if p.is_file()}  # run ids differ
    assert found
    return found


def _run(tmp_path: Path, name: str, inputs: list[str], model: str, *extra: str) -> tuple[Path, dict]:
    out = tmp_path / name
    manifest = run.main(["--input", *inputs, "--output_dir", str(out), "--tokenizer_model", model, *FLAGS,
                         *FAST_BEAM, *extra])
    return out, manifest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("columnar")
    rows = _rows()
    assert len(rows) > 20
    (root / "notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, root / "one.parquet")
    pq.write_table(table, root / "groups.parquet", row_group_size=7)
    with pa.ipc.new_file(root / "notes.arrow", SCHEMA) as writer:
        writer.write_table(table)  # one batch: batches cut chunks, as row groups do
    save_to_disk(root / "saved", table)
    return root


@pytest.fixture(scope="module")
def reference(corpus, tiny_model, tmp_path_factory):
    out, manifest = _run(tmp_path_factory.mktemp("ref"), "jsonl", [str(corpus / "notes.jsonl")], tiny_model)
    return _shards(out), manifest


@pytest.mark.parametrize("name", ["one.parquet", "notes.arrow", "saved"])
def test_columnar_inputs_make_the_jsonl_runs_shards(corpus, reference, tiny_model, tmp_path, name):
    out, manifest = _run(tmp_path, "out", [str(corpus / name)], tiny_model)
    assert _shards(out) == reference[0]
    def counts(m):  # the text bytes count each input's own bytes
        return {n: {k: v for k, v in s.items() if "bytes" not in k} for n, s in m["subsets"].items()}
    assert counts(manifest) == counts(reference[1])
    assert manifest["dead_letters"]["by_reason"] == {}


def test_row_groups_split_over_two_workers_give_the_same_bytes(corpus, tiny_model, tmp_path):
    small = ["--chunk_mb", "0.002"]
    one, _ = _run(tmp_path, "one", [str(corpus / "groups.parquet")], tiny_model, *small)
    out = tmp_path / "two"
    run.main(["--input", str(corpus / "groups.parquet"), "--output_dir", str(out), "--tokenizer_model", tiny_model,
              *FLAGS, *small, "--runner", "DirectRunner", "--direct_running_mode", "multi_threading",
              "--direct_num_workers", "2"])
    assert pq.ParquetFile(corpus / "groups.parquet").metadata.num_row_groups >= 4
    assert _shards(out) == _shards(one)


def test_null_texts_are_dead_letters_with_row_numbers(tmp_path, tiny_model):
    """Row numbers count on across row groups: row 18 is in the second group of 10."""
    bodies = ["a good note " * 5, None, "another note " * 5] + [f"note {i} " * 5 for i in range(3, 23)]
    bodies[17] = None
    table = pa.table({"body": pa.array(bodies, pa.string()),
                      "source": pa.array([{"name": "a"}, {"name": "b"}] + [None] * 21)})
    pq.write_table(table, tmp_path / "nulls.parquet", row_group_size=10)
    out, manifest = _run(tmp_path, "out", [str(tmp_path / "nulls.parquet")], tiny_model,
                         "--max_dead_letter_fraction", "1")
    assert manifest["dead_letters"]["by_reason"] == {"text_not_string": 2}
    letters = [json.loads(line) for p in sorted(out.glob("run-*/dead_letters/*.jsonl"))
               for line in p.read_text().splitlines()]
    assert sorted((Path(d["file"]).name, d["line"], d["offset"]) for d in letters) == [
        ("nulls.parquet", 2, 1), ("nulls.parquet", 18, 17)]
    assert {d["detail"] for d in letters} == {"`body` is null"}
    assert manifest["subsets"]["other"]["kept"] == 20 and manifest["subsets"]["a"]["kept"] == 1


@pytest.mark.parametrize("array, holds", [(pa.array([1, 2], pa.int64()), "a number"),
                                          (pa.array([b"x"], pa.binary()), "bytes")])
def test_a_text_column_of_another_type_is_refused_before_the_job(tmp_path, tiny_model, array, holds):
    pq.write_table(pa.table({"body": array}), tmp_path / "other.parquet")
    proc = _command("--input", str(tmp_path / "other.parquet"), "--output_dir", str(tmp_path / "out"),
                    "--tokenizer_model", tiny_model, *FLAGS, *FAST_BEAM)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--text_key 'body': in the first {len(array)} row(s) of {tmp_path / 'other.parquet'} it holds {holds}" \
        in proc.stderr


def _command(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "pipeline.run", *argv], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_a_missing_column_or_another_file_type_is_refused_before_the_job(corpus, tiny_model, tmp_path):
    proc = _command("--input", str(corpus / "one.parquet"), "--output_dir", str(tmp_path / "o"),
                    "--tokenizer_model", tiny_model, "--text_key", "text", "--default_subset", "Pile-CC")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--text_key text" in proc.stderr and "id, body, source, source.name" in proc.stderr
    for name in ("notes.csv", "notes.txt", "notes.json.bz2"):
        (tmp_path / name).write_text("x\n")
        proc = _command("--input", str(tmp_path / name), "--output_dir", str(tmp_path / "o"),
                        "--tokenizer_model", tiny_model)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert name in proc.stderr and "not a file type the job reads" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_parquet_on_s3_makes_the_local_runs_shards(corpus, reference, tiny_model, tmp_path):
    with loopback_s3("cols") as (fs, env):
        fs.put_file(str(corpus / "one.parquet"), "cols/in/one.parquet")
        fs.put(str(corpus / "saved") + "/", "cols/in/saved/", recursive=True)
        for source in ("s3://cols/in/one.parquet", "s3://cols/in/saved"):
            out = tmp_path / source.rsplit("/", 1)[-1]
            proc = _command("--input", source, "--output_dir", str(out), "--tokenizer_model", tiny_model, *FLAGS,
                            *FAST_BEAM, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert _shards(out) == reference[0]


def test_train_tokenizer_samples_parquet_and_refuses_a_missing_column(corpus, tmp_path, caplog):
    from pipeline.cli import train_tokenizer

    layout = FLAGS[:8]
    card = train_tokenizer.main(["--input", str(corpus / "groups.parquet"), *layout, "--sample_mb", "1",
                                 "--model_prefix", str(tmp_path / "m"), "--vocab_size", "400", "--num_threads", "1",
                                 "--work_dir", str(tmp_path / "work"), *FAST_BEAM])
    stats = json.loads((tmp_path / "work" / "sample_stats.json").read_text())
    assert stats["documents"] == len(_rows()) - 1 and stats["dead_letters"] == {}  # one note is empty
    assert card and (tmp_path / "m.model").exists()
    assert train_tokenizer.cli(["--input", str(corpus / "one.parquet"), "--text_key", "content", "--default_subset",
                                "Pile-CC", "--model_prefix", str(tmp_path / "n"), *FAST_BEAM]) == 2
    assert "--text_key content" in caplog.text and "its columns: id, body, source, source.name" in caplog.text


@pytest.mark.slow
def test_id_key_moves_no_chunk_boundary(corpus, tiny_model, tmp_path):
    """The id column is read for the records, but chunks are sized without it: the same shards."""
    small = ["--chunk_mb", "0.002"]
    plain, _ = _run(tmp_path, "plain", [str(corpus / "groups.parquet")], tiny_model, *small)
    with_ids, manifest = _run(tmp_path, "ids", [str(corpus / "groups.parquet")], tiny_model, *small, "--id_key", "id")
    assert _shards(with_ids) == _shards(plain) and manifest["config"]["id_key"] == "id"
