"""Every kind of tokenizer through the whole job: TFRecord and Megatron outputs, read back, shown, exact ids.

Tokenizers trained here (tests/kind_fixtures.py): a GPT-NeoX-style byte-level BPE tokenizer.json
(a directory with its tokenizer_config.json, and the bare file), a tiktoken ranks file written from
it, and a Llama-3-shaped 128k ranks file (`--tiktoken_encoding llama3`).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM, megatron_sequences, output_digests, pile_line, write_lines
from kind_fixtures import ENDOFTEXT, train_byte_level_bpe, write_hf_directory, write_llama3_shaped_ranks, write_ranks

from pipeline.cli import run, show
from pipeline.format import manifest as manifest_lib
from pipeline.format import megatron as fmt
from pipeline.tokenize.kinds.detect import load_tokenizer

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst"  # one file of the sample corpus: 600 documents
SEQ_LEN = 128


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """{name: (--tokenizer_model, extra flags)} for every kind."""
    root = tmp_path_factory.mktemp("kinds")
    bpe = train_byte_level_bpe(2000)
    hf_dir = write_hf_directory(bpe, root / "neox")
    bare = write_hf_directory(bpe, root / "bare", config=False) / "tokenizer.json"
    (root / "ranks").mkdir()
    (root / "llama3").mkdir()
    ranks = write_ranks(bpe, root / "ranks" / "bpe.tiktoken")
    big = write_llama3_shaped_ranks(train_byte_level_bpe(3000), root / "llama3" / "tokenizer.model")
    return {"hf_dir": (str(hf_dir), []), "hf_bare": (str(bare), ["--eos_id", "0"]),
            "tiktoken": (str(ranks), []), "llama3": (str(big), ["--tiktoken_encoding", "llama3"])}


@pytest.fixture(scope="module")
def tfrecord_output(kinds, tmp_path_factory):
    """name -> (directory, manifest) of the kind's default (TFRecord) output of the sample, written once."""
    runs = {}

    def get(name: str) -> tuple[Path, dict]:
        if name not in runs:
            model, extra = kinds[name]
            out = tmp_path_factory.mktemp(f"tfr-{name}") / "out"
            runs[name] = (out, _run(out, model, *extra))
        return runs[name]

    return get


def sample_texts() -> list[str]:
    import zstandard

    data = zstandard.ZstdDecompressor().stream_reader(SAMPLE.open("rb")).read()
    return [json.loads(line)["text"] for line in data.splitlines() if json.loads(line)["text"].strip()]


def _run(out, model, *extra, inputs=(str(SAMPLE),)):
    return run.main(["--input", *inputs, "--output_dir", str(out), "--tokenizer_model", model,
                     "--seq_len", str(SEQ_LEN), *extra, *FAST_BEAM])


def megatron_documents(out: Path) -> list[tuple[int, ...]]:
    return [tuple(seq.tolist()) for seq in megatron_sequences(out)]


def reader_records(out: Path) -> np.ndarray:
    """Every record's inputs, through the tf.data reader."""
    from pipeline.reader.dataset import make_dataset

    return np.concatenate([b["inputs"].numpy() for b in make_dataset(str(out), 16, shuffle=False)])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf_dir", "hf_bare", "tiktoken", "llama3"])
def test_every_kind_end_to_end_in_both_formats(name, kinds, tfrecord_output, tmp_path):
    from pipeline.reader.dataset import make_dataset

    model, extra = kinds[name]
    tok = load_tokenizer(model, tiktoken_name="llama3" if name == "llama3" else None)
    eos = 0 if name == "hf_bare" else tok.eos_id
    texts = sample_texts()
    expected = sorted(tuple([*tok.encode_one(t), eos]) for t in texts)

    meg = _run(tmp_path / "meg", model, "--output_format", "megatron", *extra)
    assert sorted(megatron_documents(tmp_path / "meg")) == expected
    tfr, rec = tfrecord_output(name)
    for manifest in (meg, rec):
        t = manifest["tokenizer"]
        assert (t["kind"], t["vocab_size"], t["eos_id"], t["sha256"]) == (tok.kind, tok.vocab_size, eos, tok.sha256)
        assert t["versions"] == tok.versions() and t["backend"]["name"] in ("tokenizers", "tiktoken")
    big = tok.vocab_size > 65_536
    assert rec["features"]["tokens"]["dtype"] == ("int32" if big else "uint16")
    assert fmt.read_index(next((tmp_path / "meg").rglob("*.idx")).read_bytes()).dtype == np.dtype(
        "<i4" if big else "<u2")
    if big:
        assert max(max(d) for d in expected) > 65_535

    # Through the reader: every whole document inside a record is one of the input's, with its exact ids.
    inputs = reader_records(tfr)
    assert inputs.shape[1] == SEQ_LEN and len(inputs) == rec["totals"]["records"] // 16 * 16  # whole batches
    wanted = {d[:-1] for d in expected}
    whole = 0
    for row in inputs.tolist():
        cuts = [i for i, t in enumerate(row) if t == eos]
        for a, b in zip(cuts, cuts[1:], strict=False):
            if b == a + 1:  # the padding of the last record (the separator)
                continue
            assert tuple(row[a + 1 : b]) in wanted
            whole += 1
    assert whole > 0
    shown = show.show(str(tfr), summary=False)
    assert "sha256 matches" in shown and "detokenized" in shown
    first = next(iter(make_dataset(str(tfr), 2, seed=0)))["inputs"].numpy()[0].tolist()
    piece = first[first.index(eos) + 1 :][:30] if eos in first[:-40] else first[:30]
    assert tok.decode(piece)[3:20] in shown  # the sequence `show` read, decoded with this kind


@pytest.mark.slow
def test_special_strings_in_text_stay_text(kinds, tmp_path):
    texts = [f"before {ENDOFTEXT} after", f"{ENDOFTEXT}", "plain words here"]
    src = write_lines(str(tmp_path / "in.jsonl"), [pile_line(t) for t in texts], compression="none")
    for name in ("hf_dir", "tiktoken"):
        model, extra = kinds[name]
        tok = load_tokenizer(model)
        out = tmp_path / name
        _run(out, model, "--output_format", "megatron", *extra, inputs=(src,))
        docs = sorted(megatron_documents(out))
        assert docs == sorted(tuple([*tok.encode_one(t), tok.eos_id]) for t in texts)
        control = tok.special_tokens[ENDOFTEXT]
        assert all(control not in d[:-1] for d in docs)  # the string is text, never the control id
        assert len(tok.encode_one(ENDOFTEXT)) > 1  # several text tokens, not the one control id


def test_a_missing_special_id_is_exit_2_naming_it(kinds, tmp_path, caplog):
    model, _ = kinds["hf_bare"]  # a bare tokenizer.json: no eos_token anywhere
    code = run.cli(["--input", str(SAMPLE), "--output_dir", str(tmp_path / "o"), "--tokenizer_model", model,
                    *FAST_BEAM])
    assert code == 2
    assert "has no EOS id" in caplog.text and "pass --eos_id N" in caplog.text
    code = run.cli(["--input", str(SAMPLE), "--output_dir", str(tmp_path / "o"), "--tokenizer_model",
                    kinds["hf_dir"][0], "--add_bos", "--bos_id", "99999", *FAST_BEAM])
    assert code == 2 and "--bos_id=99999 is outside the vocabulary" in caplog.text


@pytest.mark.slow
def test_an_unknown_file_or_backend_is_exit_2(kinds, tmp_path, caplog):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a tokenizer")
    args = ["--input", str(SAMPLE), "--output_dir", str(tmp_path / "o"), *FAST_BEAM]
    assert run.cli([*args, "--tokenizer_model", str(junk)]) == 2
    assert "not a tokenizer file of a known kind" in caplog.text
    assert run.cli([*args, "--tokenizer_model", kinds["hf_dir"][0], "--tokenizer_backend", "kitoken"]) == 2
    assert "does not apply to a huggingface tokenizer" in caplog.text


def _has_gigatoken() -> bool:
    try:
        import gigatoken  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("name,backends", [("hf_dir", ("auto", "gigatoken", "tokenizers_batch")),
                                           ("tiktoken", ("auto", "tiktoken_batch"))])
def test_fast_engine_shards_are_byte_identical(name, backends, kinds, tfrecord_output, tmp_path):
    model, extra = kinds[name]
    ref_dir, ref = tfrecord_output(name)
    assert ref["tokenizer"]["backend"]["name"] in ("tokenizers", "tiktoken")
    shards = lambda out: {k: v for k, v in output_digests(out).items() if k.endswith(".tfrecord")}  # noqa: E731
    fastest = {"hf_dir": "gigatoken" if _has_gigatoken() else "tokenizers_batch", "tiktoken": "tiktoken_batch"}
    for backend in backends:
        if backend == "gigatoken" and not _has_gigatoken():
            continue
        got = _run(tmp_path / backend, model, "--tokenizer_backend", backend, *extra)
        assert got["tokenizer"]["backend"]["name"] == (fastest[name] if backend == "auto" else backend)
        assert got["tokenizer"]["backend"]["parity"]["result"] == "passed"
        assert shards(ref_dir) == shards(tmp_path / backend) != {}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf_dir", "llama3"])
def test_provenance_of_a_step_retokenized_with_the_kind_is_the_steps_tokens(name, kinds, tmp_path):
    from pipeline.cli import provenance
    from pipeline.reader.dataset import make_dataset

    model, extra = kinds[name]
    tok = load_tokenizer(model, tiktoken_name="llama3" if name == "llama3" else None)
    out = tmp_path / "o"
    manifest = _run(out, model, "--provenance", "--shard_size_mb", "0.05", *extra)
    assert manifest["features"]["tokens"]["dtype"] == ("int32" if name == "llama3" else "uint16")
    batch = next(iter(make_dataset(str(out), global_batch_size=8, seed=5, num_epochs=None).skip(3)))
    records = provenance.step_documents(str(out), 3, 8, 5)
    assert len(records) == 8
    for row, record in enumerate(records):
        tokens = []
        for piece in record.pieces:
            document = [*tok.encode_one(piece.text), tok.eos_id]
            tokens += document[piece.first_token : piece.first_token + piece.tokens]
        real = batch["loss_mask"].numpy()[row] > 0
        assert tokens == batch["labels"].numpy()[row][real].tolist(), row
    assert f"{records[0].pieces[0].file}:{records[0].pieces[0].line}" in provenance.format_step(records)


@pytest.mark.slow
def test_the_manifest_gives_the_trainers_a_128k_vocabulary(tfrecord_output):
    out, _ = tfrecord_output("llama3")  # TFRecord: the default output format
    manifest = manifest_lib.load_manifest(str(out))
    from trainers.config import TrainConfig, resolve_model_config

    cfg = TrainConfig(train_data=str(out), model="small")
    assert resolve_model_config(cfg, manifest).vocab_size == 128_256
