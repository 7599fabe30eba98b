"""Every input kind and every tokenizer kind through the whole job with the default worker count.

Most job tests run one worker (`FAST_BEAM`) for speed; the default (every core, threads or
processes as the job chooses) is what users run, and where a file can be shared between workers.
One small corpus per kind: the same rows as JSON lines (plain, gzip, zstd), Parquet, an Arrow IPC
file, an Arrow stream and a `datasets.save_to_disk` folder all give the shards of one worker's run
of the JSON lines; tokenizer.json and tiktoken tokenizers give the same bytes with the default
workers as with one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus_helpers import FAST_BEAM, output_digests, write_lines
from test_columnar import FLAGS, SCHEMA, _rows, _shards, save_to_disk

from pipeline.cli import run

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst")
INPUT_KINDS = ["notes.jsonl", "notes.jsonl.gz", "notes.jsonl.zst", "notes.parquet", "file.arrow", "stream.arrow",
               "saved"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The same rows in every input kind."""
    root = tmp_path_factory.mktemp("kinds")
    rows = _rows()
    lines = [json.dumps(r).encode() for r in rows]
    for name, compression in (("notes.jsonl", "none"), ("notes.jsonl.gz", "gz"), ("notes.jsonl.zst", "zst")):
        write_lines(str(root / name), lines, compression=compression)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    # One row group or batch each: their chunks are then the JSON lines' (row groups and batches cut
    # chunks; several row groups on two workers: tests/test_columnar.py).
    pq.write_table(table, root / "notes.parquet")
    with pa.ipc.new_file(root / "file.arrow", SCHEMA) as writer:
        writer.write_table(table)
    with pa.ipc.new_stream(root / "stream.arrow", SCHEMA) as writer:
        writer.write_table(table)
    save_to_disk(root / "saved", table)
    return root


def _run(inputs: list[str], out: Path, model: str, *extra: str) -> dict:
    return run.main(["--input", *inputs, "--output_dir", str(out), "--tokenizer_model", model, *extra])


@pytest.fixture(scope="module")
def one_worker(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    _run([str(corpus / "notes.jsonl")], out, tiny_model, *FLAGS, *FAST_BEAM)
    return _shards(out)


@pytest.mark.parametrize("name", INPUT_KINDS)
def test_every_input_kind_on_the_default_workers(corpus, one_worker, tiny_model, tmp_path, name):
    """An Arrow file or save_to_disk folder was striped over the workers and its rows counted twice."""
    manifest = _run([str(corpus / name)], tmp_path / "out", tiny_model, *FLAGS)
    assert _shards(tmp_path / "out") == one_worker
    assert manifest["dead_letters"]["by_reason"] == {}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from kind_fixtures import train_byte_level_bpe, write_hf_directory, write_ranks

    root = tmp_path_factory.mktemp("tokenizers")
    bpe = train_byte_level_bpe(800)
    (root / "ranks").mkdir()
    return {"tokenizer.json": str(write_hf_directory(bpe, root / "hf")),
            "tiktoken": str(write_ranks(bpe, root / "ranks" / "bpe.tiktoken"))}


@pytest.mark.parametrize("kind", ["tokenizer.json", "tiktoken"])
def test_every_tokenizer_kind_on_the_default_workers(tokenizers, tmp_path, kind):
    """SentencePiece runs on the default workers above; the other kinds give one worker's bytes there too."""
    flags = ["--seq_len", "64", "--chunk_mb", "0.05"]
    default = _run([SAMPLE], tmp_path / "default", tokenizers[kind], *flags)
    _run([SAMPLE], tmp_path / "one", tokenizers[kind], *flags, *FAST_BEAM)
    assert default["tokenizer"]["kind"] in ("huggingface", "tiktoken")
    assert output_digests(tmp_path / "default") == output_digests(tmp_path / "one")
