"""The engine without Beam: one work item in, one typed result out, the same whatever is tokenized beside it."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import FruitStage, chunk, config, doc, spec
from sample_corpus import compose_lines

from pipeline.format import records
from pipeline.format.framing import FramedRecords
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.process.formats import WRITERS, writer_class
from pipeline.process.jsonl import JsonLines
from pipeline.process.megatron import DocumentSequences
from pipeline.process.result import MAGIC, Block, ChunkResult
from pipeline.process.tfrecord import PackedRecords, pack_final, pack_tails
from pipeline.process.writer import Writer, Written
from pipeline.stages import registry
from pipeline.tokenize.kinds.detect import load_tokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fruit():
    registry.register(FruitStage)
    yield FruitStage.name
    registry.unregister(FruitStage.name)


def _corpus(n: int = 60, seed: int = 5) -> list:
    lines = [json.loads(raw) for raw in compose_lines(random.Random(seed), n)]
    lines[3] = b"not json"
    lines[7] = doc("the banana split " * 5)
    lines[8] = doc("CUT an apple a day")
    lines[9] = doc("an apple for the teacher", "ArXiv")
    lines[11] = doc("")
    return lines


def _items(lines: list, per_chunk: int = 9) -> list[WorkItem]:
    return [WorkItem(chunk(lines[a:a + per_chunk], 2, a // per_chunk, first=a + 1))
            for a in range(0, len(lines), per_chunk)]


def test_a_work_item_s_documents_come_out_whole_in_input_order(tmp_path, tiny_model):
    lines = _corpus()
    engine = Engine(config(tmp_path, tiny_model, output_format="megatron"), spec(tiny_model))
    engine.setup()
    (result,) = [engine.process(item) for item in _items(lines, len(lines))]
    encode = load_tokenizer(tiny_model).encode_one
    want = [encode(o["text"]) + [2] for o in lines if isinstance(o, dict) and o["text"]]
    (block,) = result.blocks
    assert block.source == ("", 0, 2, 0)
    assert np.frombuffer(block.records.data, "<u2").tolist() == [t for ids in want for t in ids]
    assert np.diff(block.records.ends, prepend=0).tolist() == [2 * len(ids) for ids in want]
    (dead,) = result.dead_letters
    assert dead["line"] == 4 and dead["reason"] == "invalid_json" and dead["file"] == "/data/in-2.jsonl"
    stats = result.stats
    assert stats.lines == len(lines) and stats.dead_letters == {"invalid_json": 1}
    assert sum(s.documents for s in stats.subsets.values()) + 1 == len(lines)
    assert result.documents == len(want) and result.tokens == sum(map(len, want))
    assert stats.subsets["Pile-CC"].filtered["empty_text"] == 1 and result.filtered == 1


VARIANTS = {
    "concat": {},
    "concat, provenance, boundaries, epochs": {"provenance": True, "document_boundaries": True,
                                               "epochs": (("Pile-CC", 2.5), ("ArXiv", 0.5))},
    "best_fit": {"packing": "best_fit", "provenance": True},
    "megatron per subset": {"output_format": "megatron", "per_subset": True, "provenance": True,
                            "epochs": (("Pile-CC", 2.0),)},
    "stages": {"filters": ("engine_fruit",)},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_results_do_not_depend_on_what_is_tokenized_beside_them(variant, fruit, tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, **VARIANTS[variant])
    engine = Engine(cfg, spec(tiny_model, add_bos=True))
    engine.setup()
    calls = []
    encode = engine.documents.encoder.encode_verified
    engine.documents.encoder.encode_verified = lambda texts: calls.append(len(texts)) or encode(texts)
    items = _items(_corpus(90))
    removals = 1 if variant == "stages" else 0  # a work item's removed texts are counted as it is validated
    alone = [engine.process(item).to_bytes() for item in items]
    assert len(calls) == len(items) + removals
    calls.clear()
    together = [r.to_bytes() for r in engine.complete([engine.validate(item) for item in items])]
    assert together == alone and len(calls) == 1 + removals  # every kept text in one call
    fresh = Engine(cfg, spec(tiny_model, add_bos=True))
    fresh.setup()
    assert [fresh.process(item).to_bytes() for item in items] == alone  # the same bytes on every run


def test_a_result_reads_back_from_its_bytes(fruit, tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, filters=("engine_fruit",), provenance=True, id_key="id",
                 epochs=(("Pile-CC", 2.0),))
    engine = Engine(cfg, spec(tiny_model))
    engine.setup()
    lines = _corpus(40)
    lines[20] = {"text": 5, "id": "bad-20"}
    result = engine.process(_items(lines, len(lines))[0])
    assert result.blocks and result.tails and result.dead_letters and result.removed
    assert all(b.spans is not None for b in result.blocks) and result.stats.subsets["Pile-CC"].cut_rules
    data = result.to_bytes()
    assert data.startswith(MAGIC)
    back = ChunkResult.from_bytes(data)
    assert back.to_bytes() == data
    assert (back.file_index, back.chunk_index, back.input_bytes) == (2, 0, 100)
    for mine, theirs in zip(result.blocks, back.blocks, strict=True):
        assert mine.source == theirs.source and bytes(mine.records.data) == theirs.records.data
        assert np.array_equal(mine.records.ends, theirs.records.ends) and np.array_equal(mine.spans, theirs.spans)
    for mine, theirs in zip(result.tails, back.tails, strict=True):
        assert mine.copy == theirs.copy and mine.piece.context == theirs.piece.context
        for name in ("labels", "starts", "spans"):
            got = getattr(theirs.piece, name)
            assert np.array_equal(getattr(mine.piece, name), got) and got.dtype == getattr(mine.piece, name).dtype
    assert back.stats == result.stats
    assert back.dead_letters == result.dead_letters and json.dumps(back.removed) == json.dumps(result.removed)
    with pytest.raises(ValueError, match="not a work item's result"):
        ChunkResult.from_bytes(b"PK\x03\x04" + data[4:])
    with pytest.raises(ValueError, match="cut short"):
        ChunkResult.from_bytes(data[:-3])


def test_the_tails_joined_are_every_label_left_once(tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, seq_len=16)
    engine = Engine(cfg, spec(tiny_model))
    engine.setup()
    results = [engine.process(item) for item in _items(_corpus(40), 7)]
    tails = [(r.chunk_index, t.piece) for r in results for t in r.tails]
    joined = pack_tails(cfg, engine.writer.special, 0, 2, tails[::-1])  # any order: joined by chunk
    final = pack_final(cfg, engine.writer.special, [((0, 2), joined.remainder)])
    records = sum(len(b.records) for r in results for b in r.blocks) + len(joined.block.records) + len(
        final.block.records)
    labels = sum(r.tokens for r in results)
    assert joined.stats.records_from_tails == len(joined.block.records)
    assert final.stats.padded_records == 1 and records == -(-labels // 16)
    assert final.stats.padding_labels == records * 16 - labels


class ToyLines(Writer):
    """A format of the test's own: the cleaned text as JSON lines (docs/extending.md's example)."""

    name = "toy_lines"
    token_dtype = staticmethod(records.token_dtype_for)

    def write(self, docs):
        lines = [json.dumps({"text": t, "subset": s}).encode() + b"\n"
                 for t, s, n in zip(docs.texts, docs.subsets, docs.copies.tolist(), strict=True) if n >= 0]
        source = ("", 0, docs.chunk.file_index, docs.chunk.chunk_index)
        return Written([Block(source, FramedRecords(b"".join(lines), np.cumsum([len(x) for x in lines])))])


def test_a_new_format_is_a_writer_and_a_row(fruit, monkeypatch, tmp_path, tiny_model):
    monkeypatch.setitem(WRITERS, ToyLines.name, ToyLines)
    engine = Engine(config(tmp_path, tiny_model, filters=(fruit,)), spec(tiny_model), writer_class("toy_lines"))
    engine.setup()
    lines = _corpus(30)
    results = [engine.process(item) for item in _items(lines)]
    written = [json.loads(x) for r in results for b in r.blocks for x in bytes(b.records.data).splitlines()]
    kept = [o for o in lines if isinstance(o, dict) and o["text"] and "banana" not in o["text"].split()]
    assert [w["text"] for w in written] == [o["text"].removeprefix("CUT ") for o in kept]
    assert sum(r.documents for r in results) == len(written) and results[0].removed


ENGINE_WITHOUT_BEAM = """
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "apache_beam":
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from pipeline.config.job import PipelineConfig
from pipeline.core.documents import Line
from pipeline.io.inputs import Chunk
from pipeline.process import clean, dedup_input, sample  # noqa: F401 -- every engine module imports
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.tokenize.model import BackendChoice, TokenizerModel
model = TokenizerModel.load("tokenizers/sample/sample.model")
spec = model.spec(BackendChoice("sentencepiece", "", {}), model.special_ids(add_bos=False, add_eos=True))
engine = Engine(PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model=model.path, seq_len=8), spec)
engine.setup()
data = json.dumps({"text": "a document " * 20, "meta": {"pile_set_name": "ArXiv"}}).encode()
result = engine.process(WorkItem(Chunk(0, 0, "in.jsonl", (Line(1, 0, data),))))
print(len(result.blocks[0].records), "apache_beam" in sys.modules)
"""


@pytest.mark.slow
def test_the_engine_runs_without_beam():
    done = subprocess.run([sys.executable, "-c", ENGINE_WITHOUT_BEAM], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    records, beam_loaded = done.stdout.split()
    assert int(records) > 0 and beam_loaded == "False"


def test_the_formats_writers_are_found_by_name(tmp_path, tiny_model):
    assert WRITERS == {"tfrecord": PackedRecords, "megatron": DocumentSequences, "jsonl": JsonLines}
    assert isinstance(Engine(config(tmp_path, tiny_model), spec(tiny_model)).writer, PackedRecords)
    with pytest.raises(KeyError, match="no engine writer for output format 'parquet'"):
        writer_class("parquet")
