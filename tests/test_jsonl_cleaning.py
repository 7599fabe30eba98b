"""`--output_format jsonl` as a cleaning step: stages, PII, dedup and hostile lines, read by datatrove and inspected.

With `--filters gopher_quality,c4_quality --pii email,ip --dedup exact` the JSON lines hold exactly
the documents a tokenizing run of the same flags tokenizes (its Megatron output, one document per
sequence in the same order, is the tokenizer's ids of each line's text); hostile lines keep the
accounting exact; datatrove's own JsonlReader (in .venv-datatrove) reads the files; `removed` and
`report` work on the output and `show` refuses it in one line. The engine's text-only path and the
shard writer's memory are checked without Beam's runner.
"""

import io
import json
import os
import re
import subprocess
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import zstandard
from corpus_helpers import FAST_BEAM, write_lines
from engine_helpers import FruitStage, chunk, config, doc
from test_jsonl_output import read_output, with_datasets
from test_megatron_output import read_output as read_megatron

from pipeline.cli import removed as removed_cli
from pipeline.cli import report as report_cli
from pipeline.cli import run
from pipeline.cli import show as show_cli
from pipeline.format.framing import FramedRecords
from pipeline.process.documents import NO_TOKENIZER, WorkItem
from pipeline.process.engine import Engine
from pipeline.stages import registry
from pipeline.stages.pii import EMAIL_REPLACEMENTS

REPO = Path(__file__).resolve().parents[1]
DATATROVE = REPO / ".venv-datatrove" / "bin" / "python"
CLEANING = ["--filters", "gopher_quality,c4_quality", "--pii", "email,ip", "--dedup", "exact"]
HUGE = 600_000  # characters: past --max_line_mb 0.5
BLOCKS = 32  # of 1 MiB, through the shard writer


def _line(text: str, subset: str = "Enron Emails", **more) -> bytes:
    return json.dumps({"text": text, "meta": {"pile_set_name": subset}, **more}, ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The sample Pile's first 150 lines, then addresses, duplicates and hostile lines (with ids)."""
    root = tmp_path_factory.mktemp("cleaning")
    data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(
        (REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst").read_bytes())).read()
    sample = data.split(b"\n")[:150]
    body = ("Dear colleagues, the quarterly report is attached and the numbers look good this time. "
            "Please send your comments to the whole team before the meeting on Friday. ") * 4
    extra = [_line(f"Write to alice.smith@example.org or to 8.8.4.4 for help. {body}", id="doc-alice@example.org"),
             _line(f"The server at 93.184.216.34 answered. {body}", id=7),
             sample[20], sample[21],  # exact duplicates of lines before them
             _line("x" * HUGE, id="huge"), b'{"text": "bad \xff\xfe byte", "meta": {"pile_set_name": "Github"}}',
             b"not json at all", _line("   ", "ArXiv", id="blank")]
    write_lines(str(root / "train.jsonl.zst"), sample + extra)
    return root


@pytest.fixture(scope="module")
def cleaned(corpus, tmp_path_factory):
    """(output dir, manifest) of the cleaning run without a tokenizer."""
    out = tmp_path_factory.mktemp("cleaned") / "out"
    return out, run.main(["--input", str(corpus / "train.jsonl.zst"), "--output_dir", str(out), "--output_format",
                          "jsonl", "--id_key", "id", "--max_line_mb", "0.5", "--chunk_mb", "0.05", *CLEANING,
                          *FAST_BEAM])


@pytest.mark.slow
def test_the_lines_are_what_a_tokenizing_run_of_the_same_flags_tokenizes(corpus, cleaned, tiny_model, tmp_path):
    out, manifest = cleaned
    meg = tmp_path / "meg"
    tokenized = run.main(["--input", str(corpus / "train.jsonl.zst"), "--output_dir", str(meg), "--output_format",
                          "megatron", "--tokenizer_model", tiny_model, "--id_key", "id", "--max_line_mb", "0.5",
                          "--chunk_mb", "0.05", *CLEANING, *FAST_BEAM])
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    docs = read_output(out)
    (sequences,) = read_megatron(meg).values()
    assert len(docs) == len(sequences) == manifest["totals"]["documents"] > 50
    for i, (line, ids) in enumerate(zip(docs, sequences, strict=True)):
        assert np.array_equal(np.array(sp.encode(line["text"]) + [sp.eos_id()]), ids), f"document {i}"
    # The same decisions: removed/ and dead-letter files byte for byte, the same counts but tokens.
    for key in ("removed", "dead_letters"):
        for mine, theirs in zip(manifest[key]["files"], tokenized[key]["files"], strict=True):
            assert (out / mine["path"]).read_bytes() == (meg / theirs["path"]).read_bytes()
    assert manifest["removed"]["by_reason"] == tokenized["removed"]["by_reason"]
    assert set(manifest["removed"]["by_reason"]) == {"gopher_quality", "duplicate_exact"}
    for name, s in manifest["subsets"].items():
        t = tokenized["subsets"][name]
        assert {k: s[k] for k in ("documents", "kept", "filtered", "removed", "cut", "text_bytes") if k in s} == {
            k: t[k] for k in ("documents", "kept", "filtered", "removed", "cut", "text_bytes") if k in t}


@pytest.mark.slow
def test_hostile_lines_keep_the_accounting_exact_and_no_address_is_written(cleaned, tmp_path):
    out, manifest = cleaned
    subsets = manifest["subsets"].values()
    kept, documents = sum(s["kept"] for s in subsets), sum(s["documents"] for s in subsets)
    removed = sum(sum(s.get("removed", {}).values()) for s in subsets)
    filtered = sum(sum(s["filtered"].values()) for s in subsets)
    dead = manifest["dead_letters"]["records"]
    assert kept + removed + filtered == documents and documents + dead == manifest["totals"]["lines"] == 158
    assert kept == manifest["totals"]["documents"] == len(read_output(out))
    assert dead == 3 and manifest["dead_letters"]["by_reason"].get("line_too_long") == 1
    assert manifest["subsets"]["ArXiv"]["filtered"].get("empty_text") == 1
    ds = with_datasets(out, tmp_path)
    written = "\n".join(json.dumps(row) for row in ds)
    assert set(re.findall(r"[\w.+-]+@[\w-]+\.[\w.]+", written)) <= set(EMAIL_REPLACEMENTS)
    assert not re.search(r"8\.8\.4\.4|93\.184\.216\.34", written)
    by_id = {row["id"]: row for row in ds if row["id"] is not None}
    assert set(by_id) == {"email@example.com", 7}  # the id (an address) redacted as every record is
    assert "Write to email@example.com or to" in by_id["email@example.com"]["text"]
    assert manifest["jsonl"]["keys"] == ["text", "id", "metadata"]
    assert set(ds.column_names) == {"text", "id", "metadata"}
    tallies = {k: n for s in subsets for k, n in s.get("tallies", {}).get("pii", {}).items()}
    assert tallies and "tokens_by_reason" not in manifest["removed"]
    assert all("tokens" not in entry for s in subsets for rules in s.get("rules", {}).values()
               for entry in rules.values())


@pytest.mark.slow
def test_datatrove_reads_the_same_documents(cleaned):
    """datatrove's JsonlReader, in its own environment, over the output's folder: text, id, metadata."""
    out, manifest = cleaned
    assert DATATROVE.exists(), "the datatrove environment is missing: bash scripts/setup_datatrove_env.sh makes it"
    has_orjson = subprocess.run([str(DATATROVE), "-c", "import orjson"], capture_output=True).returncode == 0
    assert has_orjson, "JsonlReader needs orjson in .venv-datatrove: bash scripts/setup_datatrove_env.sh installs it"
    script = ("import json, sys\nfrom datatrove.pipeline.readers import JsonlReader\n"
              "reader = JsonlReader(sys.argv[1], glob_pattern='train-*.jsonl.zst', add_file_path=False)\n"
              "print(json.dumps([[d.text, d.id, d.metadata] for d in reader.run()]))\n")
    result = subprocess.run([str(DATATROVE), "-c", script, str(out / "latest")], capture_output=True, text=True,
                            timeout=300, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.splitlines()[-1])
    want = read_output(out)
    assert len(got) == len(want) == manifest["totals"]["documents"]
    seen: list = []
    for (text, ident, metadata), line in zip(got, want, strict=True):
        assert text == line["text"] and metadata == line["metadata"]
        assert ident == line.get("id", f"train-00000-of-00001.jsonl.zst/{len(seen)}")  # datatrove names one without
        seen.append(ident)


@pytest.mark.slow
def test_removed_and_report_read_the_output_and_show_refuses_it(cleaned, tmp_path, capsys):
    out, _ = cleaned
    assert removed_cli.cli([str(out), "--sample", "1", "--per_rule", "--format", "json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["reason"] for r in printed} >= {"gopher_quality", "duplicate_exact", "c4_quality_cut"}
    assert report_cli.cli([str(out), "--html", str(tmp_path / "report.html"), "--examples", "1"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "gopher_quality" in page and "duplicate_exact" in page
    capsys.readouterr()
    assert show_cli.cli([str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a cleaned-text output" in err[0] and "datasets.load_dataset" in err[0]


@pytest.mark.slow
def test_an_output_of_no_documents_is_not_published(tmp_path):
    empty = write_lines(str(tmp_path / "empty.jsonl"), [_line(" "), _line("\n\t", "ArXiv")], compression="none")
    out = tmp_path / "out"
    with pytest.raises(Exception, match="wrote no records: 2 lines read, 0 dead letters"):
        run.main(["--input", empty, "--output_dir", str(out), "--output_format", "jsonl", *FAST_BEAM])
    assert not (out / "manifest.json").exists() and not list(out.glob("run-*/*.jsonl.zst"))


@pytest.fixture
def fruit():
    registry.register(FruitStage)
    yield FruitStage.name
    registry.unregister(FruitStage.name)


def test_the_engine_without_a_tokenizer_writes_labels_and_cuts_and_counts_no_tokens(fruit, tmp_path):
    cfg = config(tmp_path, None, output_format="jsonl", filters=(fruit,), id_key="id", seq_len=2048)
    engine = Engine(cfg, NO_TOKENIZER)
    engine.setup()
    assert engine.documents.encoder is None  # nothing to load, nothing encoded
    lines = [doc("CUT an apple", id="a"), doc("the banana split", id="b"), doc("an apple pie", "ArXiv"), b"{bad"]
    result = engine.process(WorkItem(chunk(lines)))
    (block,) = result.blocks
    written = [json.loads(x) for x in bytes(block.records.data).splitlines()]
    assert [(w["text"], w.get("id"), w["metadata"].get("fruit")) for w in written] == [
        ("an apple", "a", None), ("an apple pie", None, "apple")]
    assert written[0]["metadata"]["source"] == {"file": "/data/in-0.jsonl", "line": 1}
    subsets = result.stats.to_json()["subsets"]
    assert all("tokens" not in s and "removed_tokens" not in s for s in subsets.values())
    assert subsets["ArXiv"]["labels"] == {"fruit": {"apple": {"documents": 1}}}
    assert subsets["Pile-CC"]["rules"] == {"engine_fruit": {"banana": {"documents": 1}}}


def test_the_shard_writer_holds_one_block_whatever_the_shard_s_size(tmp_path):
    """32 MiB of lines in 1 MiB blocks, handed over in reverse: the writer's Python memory stays a few blocks."""
    from pipeline.beam import jsonl as beam_jsonl

    cfg, _ = run.parse_args(["--input", "x", "--output_dir", str(tmp_path), "--output_format", "jsonl"])
    line = b'{"text":"' + b"word " * 200 + b'"}\n'
    per_block = (1 << 20) // len(line)

    def blocks():
        for k in reversed(range(BLOCKS)):
            data = line * per_block
            yield k * per_block, FramedRecords(data, np.arange(1, per_block + 1, dtype=np.int64) * len(line))

    fn = beam_jsonl.WriteShardFn(cfg, "0123456789abcdef")
    tracemalloc.start()
    try:
        (info,) = fn.process((("", 0), blocks()), {("", 0): "train-00000-of-00001"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    data = (tmp_path / info["path"]).read_bytes()
    assert info["documents"] == BLOCKS * per_block and info["uncompressed_bytes"] == BLOCKS * per_block * len(line)
    assert zstandard.ZstdDecompressor().decompress(data) == line * (BLOCKS * per_block)
    assert peak < 12 << 20, peak
    again = list(fn.process((("", 0), blocks()), {("", 0): "train-00000-of-00001"}))
    assert again == [info]  # a retried write publishes the same bytes
