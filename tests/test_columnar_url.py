"""--url_key on Parquet, Arrow and save_to_disk inputs: the URL column read (only when a stage asks), the same
removals and shards as the same rows in JSON lines, chunks cut as without it, a file without it refused.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus_helpers import FAST_BEAM

from pipeline.core.documents import Schema
from pipeline.io import columnar

SCHEMA = pa.schema([("text", pa.string()), ("meta", pa.struct([("pile_set_name", pa.string())])),
                    ("url", pa.string())])
KINDS = ["rows.parquet", "rows.arrow", "saved"]


def _rows() -> list[dict]:
    rows = []
    for i in range(40):
        url = None if i % 13 == 5 else f"https://site{i % 4}.example.org/{'casino' if i % 6 == 0 else 'page'}/{i}"
        text = f"document {i}: " + " ".join(f"word{(i * 7 + k) % 31}" for k in range(3 + i % 9))
        rows.append({"text": text, "meta": {"pile_set_name": "Pile-CC" if i % 3 else "ArXiv"}, "url": url})
    return rows


def _write(root: Path, rows: list[dict]) -> None:
    """The rows as JSON lines, Parquet, an Arrow file and a save_to_disk folder, each one chunk of the job."""
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, root / "rows.parquet")
    with pa.ipc.new_file(root / "rows.arrow", SCHEMA) as writer:
        writer.write_table(table)
    saved = root / "saved"  # `datasets`' layout of one split: an Arrow stream and its two JSON files
    saved.mkdir()
    with pa.ipc.new_stream(saved / "data-00000-of-00001.arrow", SCHEMA) as writer:
        writer.write_table(table)
    (saved / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string"}}}))
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                  "_fingerprint": "f", "_split": "train"}))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("url_rows")
    _write(root, _rows())
    (root / "banned.txt").write_text("casino\n")
    return root


def _lines(path: Path, schema: Schema, chunk_bytes: int = 300) -> list[list]:
    units = columnar.read_units(str(path))
    return [[line for line in chunk.lines] for unit in units
            for chunk in columnar.iter_unit_chunks(str(path), 0, unit, chunk_bytes, schema)]


@pytest.mark.parametrize("name", ["rows.parquet", "rows.arrow"])
def test_the_url_column_is_read_only_when_asked_and_moves_no_chunk_boundary(corpus, name):
    plain, with_url = Schema(), Schema(extra_keys=(("--url_key", "url"),))
    without = _lines(corpus / name, plain)
    read = _lines(corpus / name, with_url)
    assert [[line.number for line in c] for c in read] == [[line.number for line in c] for c in without]
    assert all(b"url" not in line.data for chunk in without for line in chunk)
    rows = _rows()
    for chunk in read:
        for line in chunk:
            got = json.loads(line.data)
            assert got == {k: v for k, v in rows[line.number - 1].items() if v is not None}, line.number


def test_a_file_without_the_url_column_is_refused_naming_the_flag(corpus, tmp_path):
    table = pa.Table.from_pylist([{"text": "a", "meta": {"pile_set_name": "ArXiv"}}])
    pq.write_table(table, tmp_path / "no_url.parquet")
    schema = Schema(extra_keys=(("--url_key", "meta.url"),))
    with pytest.raises(columnar.ColumnError, match=r"--url_key meta.url: .*no_url.parquet has no such column "
                       r"\(its columns: text, meta, meta.pile_set_name\)"):
        columnar.check_columns(str(tmp_path / "no_url.parquet"), schema)
    columnar.check_columns(str(corpus / "rows.parquet"), Schema(extra_keys=(("--url_key", "url"),)))
    with pytest.raises(ValueError, match="--url_key 'text' is also --text_key"):
        Schema(extra_keys=(("--url_key", "text"),))


def test_the_job_s_schema_carries_the_url_key_only_with_the_url_filter(tmp_path, tiny_model):
    from pipeline.config.job import PipelineConfig
    from pipeline.config.tokenizer import SampleConfig
    from pipeline.stages.url_filter import UrlFilterOptions

    base = {"inputs": ("x",), "output_dir": str(tmp_path), "tokenizer_model": tiny_model}
    assert PipelineConfig(**base).schema.extra_keys == ()
    on = PipelineConfig(**base, filters=("url_filter",), stage_options=(UrlFilterOptions(url_key="meta.url"),))
    assert on.schema.extra_keys == (("--url_key", "meta.url"),) and on.schema.extra_paths == (("meta", "url"),)
    sample = SampleConfig(inputs=("x",), filters=("url_filter",), stage_options=(UrlFilterOptions(url_key="u"),))
    assert sample.schema.extra_keys == (("--url_key", "u"),)  # train-tokenizer's sample reads it too
    assert SampleConfig(inputs=("x",)).schema.extra_keys == ()


def _removed(out: Path, manifest: dict) -> list[tuple]:
    return sorted((r["line"], r["rule"], r.get("word")) for entry in manifest["removed"]["files"]
                  for r in map(json.loads, (out / entry["path"]).read_text().splitlines()))


def _job(corpus: Path, name: str, out: Path, model: str) -> dict:
    from pipeline.cli import run

    return run.main(["--input", str(corpus / name), "--output_dir", str(out), "--tokenizer_model", model,
                     "--seq_len", "16", "--filters", "url_filter",
                     "--url_banned_words", str(corpus / "banned.txt"), *FAST_BEAM])


@pytest.fixture(scope="module")
def from_jsonl(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("jsonl") / "out"
    return out, _job(corpus, "rows.jsonl", out, tiny_model)


@pytest.mark.slow
@pytest.mark.parametrize("name", KINDS)
def test_each_columnar_kind_removes_what_its_json_lines_remove(corpus, from_jsonl, tiny_model, tmp_path, name):
    out = tmp_path / "out"
    manifest = _job(corpus, name, out, tiny_model)
    removed = _removed(out, manifest)
    rows = _rows()
    assert removed == _removed(*from_jsonl)
    assert {line for line, rule, _ in removed if rule == "no_url"} == {i + 1 for i, r in enumerate(rows)
                                                                       if r["url"] is None}
    assert {line for line, rule, word in removed if rule == "hard_blacklisted" and word == "casino"} == {
        i + 1 for i, r in enumerate(rows) if r["url"] and "casino" in r["url"]}
    shards = sorted(p.read_bytes() for p in out.rglob("*.tfrecord"))
    assert shards == sorted(p.read_bytes() for p in from_jsonl[0].rglob("*.tfrecord"))
    assert manifest["removed"]["by_reason"] == from_jsonl[1]["removed"]["by_reason"]
