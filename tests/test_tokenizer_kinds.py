"""Tokenizer files of every kind: detection, special ids from their own config, reference ids with
special strings as text, and the fast engines behind the self-check (pipeline/tokenize/kinds/,
engines.py, self_check.py). Every tokenizer is trained here: no hub."""

import json
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
from corpus_helpers import pile_line, write_lines
from kind_fixtures import (
    ENDOFTEXT,
    PADDING,
    real_documents,
    shifted_hf_json,
    train_byte_level_bpe,
    write_hf_directory,
    write_ranks,
)

from pipeline.tokenize import engines, self_check
from pipeline.tokenize.encoder import Encoder
from pipeline.tokenize.engines import BackendUnavailable, load_engine
from pipeline.tokenize.kinds import registry, tiktoken_bpe
from pipeline.tokenize.kinds.base import TokenizerFileError, UnknownTokenizerKind
from pipeline.tokenize.kinds.detect import detect_kind, load_tokenizer
from pipeline.tokenize.kinds.registry import KINDS

SAMPLE_MODEL = "tokenizers/sample/sample.model"


@pytest.fixture(scope="module")
def bpe():
    return train_byte_level_bpe(2000)


@pytest.fixture(scope="module")
def kinds(bpe, tmp_path_factory):
    """One tokenizer location of each kind (a Hugging Face directory, a tiktoken ranks file, a .model)."""
    root = tmp_path_factory.mktemp("kinds")
    hf = write_hf_directory(bpe, root / "neox")
    ranks = write_ranks(bpe, root / "ranks.tiktoken")
    return {"huggingface": str(hf), "tiktoken": str(ranks), "sentencepiece": SAMPLE_MODEL}


FUZZ_ALPHABET = ["\n", " ", "  ", "\r\n", "\t", "a", "Z", "1", ".", "'s", "é", "e\u0301", "数据", "🙂", "<s>", "</s>",
                 ENDOFTEXT, "<|endoftext", "\u2028", "\u200b", "\x00", "word", "the ", "\n    ", "ΟΔΟΣ"]


def _fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(1, 80))) for _ in range(count)]


# --- detection ---------------------------------------------------------------------------------------

def test_each_kind_is_detected_from_its_bytes_not_its_name(kinds, tmp_path):
    for kind, path in kinds.items():
        assert detect_kind(path) == kind
        assert load_tokenizer(path).kind == kind
    assert detect_kind(kinds["huggingface"] + "/tokenizer.json") == "huggingface"
    # Llama 3's ranks file is called tokenizer.model.
    llama_like = tmp_path / "tokenizer.model"
    llama_like.write_bytes(open(kinds["tiktoken"], "rb").read())
    assert detect_kind(str(llama_like)) == "tiktoken"


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b"hello world\n", b'{"bos_token": "<s>"}',
                                     b"not base64! 1\n", "é".encode() * 10])
def test_a_file_of_no_known_kind_is_one_clear_error(tmp_path, content):
    path = tmp_path / "mystery.bin"
    path.write_bytes(content)
    with pytest.raises(UnknownTokenizerKind, match="mystery.bin") as e:
        load_tokenizer(str(path))
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_a_directory_without_tokenizer_json_and_a_missing_file_are_named(tmp_path):
    with pytest.raises(UnknownTokenizerKind, match="without tokenizer.json"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(TokenizerFileError, match="nothere"):
        load_tokenizer(str(tmp_path / "nothere.json"))


def test_a_corrupt_sentencepiece_model_is_named(tmp_path):
    path = tmp_path / "cut.model"
    path.write_bytes(open(SAMPLE_MODEL, "rb").read()[:1000])
    with pytest.raises(TokenizerFileError, match="cut.model"):
        load_tokenizer(str(path))


# --- special ids from the tokenizer's own files --------------------------------------------------------

def test_hugging_face_special_ids_come_from_its_config_files(bpe, tmp_path):
    eot, pad = bpe.token_to_id(ENDOFTEXT), bpe.token_to_id(PADDING)
    bare = write_hf_directory(bpe, tmp_path / "bare", config=False)
    tok = load_tokenizer(str(bare))
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (-1, -1, -1)  # nothing guessed from names
    assert tok.special_tokens == {ENDOFTEXT: eot, PADDING: pad}
    (bare / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": ENDOFTEXT},
                                                              "pad_token": PADDING}))
    tok = load_tokenizer(str(bare))
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (-1, eot, pad)
    assert tok.special_sources["eos"].startswith("special_tokens_map.json")
    (bare / "tokenizer_config.json").write_text(json.dumps({"eos_token": PADDING}))  # takes precedence
    tok = load_tokenizer(str(bare / "tokenizer.json"))  # the file itself: its companions are read too
    assert tok.eos_id == pad and set(tok.files) == {"tokenizer.json", "tokenizer_config.json",
                                                     "special_tokens_map.json"}
    (bare / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(TokenizerFileError, match="'</s>'"):
        load_tokenizer(str(bare))


def test_hugging_face_special_ids_from_the_post_processor_template(bpe, tmp_path):
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_str(bpe.to_str())
    eot, pad = tok.token_to_id(ENDOFTEXT), tok.token_to_id(PADDING)
    # As Llama 3's tokenizer.json has it: a Sequence of ByteLevel and the template.
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{PADDING} $A {ENDOFTEXT}",
                                      special_tokens=[(PADDING, pad), (ENDOFTEXT, eot)])])
    loaded = load_tokenizer(str(write_hf_directory(tok, tmp_path / "t", config=False)))
    assert (loaded.bos_id, loaded.eos_id) == (pad, eot)
    assert loaded.special_sources["eos"].startswith("tokenizer.json post_processor")
    # The template is not applied to documents: the reference adds no special tokens.
    assert eot not in loaded.encode_one("some text")


def test_truncation_in_the_file_does_not_cut_documents(bpe, tmp_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(bpe.to_str())
    tok.enable_truncation(8)
    tok.enable_padding(length=64)
    loaded = load_tokenizer(str(write_hf_directory(tok, tmp_path / "trunc")))
    text = real_documents()[0][:5000]
    assert loaded.encode_one(text) == bpe.encode(text, add_special_tokens=False).ids
    assert len(loaded.encode_one(text)) > 64


def test_tiktoken_pattern_and_specials_from_the_json_or_a_built_in(bpe, tmp_path):
    ranks = write_ranks(bpe, tmp_path / "r.tiktoken")
    tok = load_tokenizer(str(ranks))
    assert tok.eos_id == tok.special_tokens[ENDOFTEXT] == tok.vocab_size - 1
    assert tok.to_json()["files"].keys() == {"r.tiktoken", "r.tiktoken.json"}
    # A built-in's special ids follow its ranks: a file of another size is refused, not misread.
    with pytest.raises(TokenizerFileError, match="cl100k_base has 100256 ranks"):
        load_tokenizer(str(ranks), tiktoken_name="cl100k_base")
    with pytest.raises(TokenizerFileError, match="unknown tiktoken encoding"):
        load_tokenizer(str(ranks), tiktoken_name="p99k")
    (tmp_path / "r.tiktoken.json").unlink()
    with pytest.raises(TokenizerFileError, match="r.tiktoken.json beside it"):
        load_tokenizer(str(ranks))
    (tmp_path / "r.tiktoken.json").write_text(json.dumps({"pattern": tiktoken_bpe.R50K_PATTERN,
                                                          "special_tokens": {ENDOFTEXT: 5}}))
    with pytest.raises(TokenizerFileError, match="ids of ranks"):
        load_tokenizer(str(ranks))
    (tmp_path / "r.tiktoken.json").write_text(json.dumps({"pattern": "(unclosed", "special_tokens": {}}))
    with pytest.raises(TokenizerFileError, match="tiktoken refuses"):
        load_tokenizer(str(ranks))
    with pytest.raises(TokenizerFileError, match="line 2"):
        bad = tmp_path / "bad.tiktoken"
        bad.write_text("IQ== 0\nnot-a-line\n")
        load_tokenizer(str(bad))


def test_sentencepiece_special_ids_are_the_models(kinds):
    tok = load_tokenizer(kinds["sentencepiece"])
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, 8000)
    assert tok.special_tokens == {"<s>": 1, "</s>": 2}


def test_a_worker_refuses_a_tokenizer_that_changed(kinds):
    tok = load_tokenizer(kinds["huggingface"])
    assert load_tokenizer(kinds["huggingface"], expected_sha256=tok.sha256).sha256 == tok.sha256
    with pytest.raises(TokenizerFileError, match="changed"):
        load_tokenizer(kinds["huggingface"], expected_sha256="0" * 64)


# --- special strings in documents are text -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["huggingface", "tiktoken", "sentencepiece"])
def test_literal_special_tokens_in_a_document_are_text(kinds, kind):
    tok = load_tokenizer(kinds[kind])
    assert tok.special_tokens
    for special, special_id in tok.special_tokens.items():
        for text in [special, f"a{special}b", f"x {special}\n{special} y", special * 3]:
            ids = tok.encode_one(text)
            assert special_id not in ids, (special, text)
            assert tok.decode(ids) == text
    for literal in ("<s>", "</s>", ENDOFTEXT):
        ids = tok.encode_one(f"before {literal} after")
        assert not set(ids) & set(tok.special_tokens.values())


@pytest.mark.parametrize("kind", ["huggingface", "tiktoken"])
def test_the_fast_engine_also_encodes_special_strings_as_text(kinds, kind):
    tok = load_tokenizer(kinds[kind])
    texts = [f"{s} and {s}{s}" for s in tok.special_tokens]
    for backend in KINDS[kind].fast:
        ids, _ = load_engine(backend, tok).encode(texts)
        assert not set(ids.tolist()) & set(tok.special_tokens.values()), backend


# --- reference and fast engines: equal ids ---------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huggingface", "tiktoken"])
def test_fast_engines_give_the_reference_ids(kinds, kind):
    tok = load_tokenizer(kinds[kind])
    texts = real_documents() + _fuzz(1, 500) + self_check.check_texts(tok, long_line=1 << 14)
    want = tok.encode(texts)
    for backend in KINDS[kind].fast:
        for threads in (None, 1):
            got = load_engine(backend, tok, threads).encode(texts)
            assert np.array_equal(want[1], got[1]) and np.array_equal(want[0], got[0]), (backend, threads)
    assert tok.decode(tok.encode_one(real_documents()[0])) == real_documents()[0]


def test_the_reference_is_the_owning_librarys_own_encode(bpe, kinds):
    tok = load_tokenizer(kinds["huggingface"])
    text = real_documents()[1][:20_000] + f" {ENDOFTEXT} tail"
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(bpe.to_str())
    own.encode_special_tokens = True
    assert tok.encode_one(text) == own.encode(text, add_special_tokens=False).ids
    # The reference runs `encode` through `encode_batch` (no GIL held): per text, the same ids.
    texts = real_documents() + _fuzz(2, 300) + self_check.check_texts(tok, long_line=1 << 12)
    ids, offsets = engines.ReferenceEngine(tok, threads=1).encode(texts)
    for k, one in enumerate(texts):
        assert ids[offsets[k]:offsets[k + 1]].tolist() == own.encode(one, add_special_tokens=False).ids, k


def test_an_engine_of_another_kind_is_refused(kinds):
    tok = load_tokenizer(kinds["tiktoken"])
    with pytest.raises(BackendUnavailable, match="tokenizers_batch"):
        load_engine("tokenizers_batch", tok)
    with pytest.raises(BackendUnavailable, match="kitoken"):
        load_engine("kitoken", load_tokenizer(kinds["huggingface"]))
    # SentencePiece is one more kind, with its own engines; a kind the pipeline does not know has none.
    assert registry.backends("sentencepiece") == ("sentencepiece", "gigatoken", "kitoken", "auto")
    with pytest.raises(ValueError, match="unknown kind"):
        registry.backends("wordpiece")


# --- the driver's self-check ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    lines = [pile_line(t) for t in real_documents() + _fuzz(2, 200)]
    return [write_lines(str(root / "00.jsonl.zst"), lines)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huggingface", "tiktoken"])
def test_auto_uses_the_fast_engine_after_the_self_check(kinds, corpus, kind):
    tok = load_tokenizer(kinds[kind])
    choice = self_check.choose_backend("auto", tok, corpus)
    assert choice.name == KINDS[kind].auto[0]
    parity = choice.parity
    assert parity["result"] == "passed" and parity["mismatches"] == 0 and parity["documents"] > 200
    assert parity["adversarial_strings"] > 100
    reference = self_check.choose_backend(KINDS[kind].reference, tok, corpus)
    assert reference.name == KINDS[kind].reference and reference.parity == {}
    with pytest.raises(ValueError, match="must be one of"):
        self_check.choose_backend("kitoken", tok, corpus)
    if kind == "huggingface":  # by name: checked the same way
        named = self_check.choose_backend("gigatoken", tok, corpus)
        assert named.name == "gigatoken" and named.parity["result"] == "passed"


@pytest.mark.slow
def test_auto_falls_back_on_a_mismatch_and_a_named_engine_fails(kinds, corpus, monkeypatch):
    tok = load_tokenizer(kinds["huggingface"])

    def off(engine):
        class Off(engine):
            def encode(self, texts):
                ids, offsets = super().encode(texts)
                if len(ids):
                    ids = ids.copy()
                    ids[-1] = (ids[-1] + 1) % tok.vocab_size
                return ids, offsets
        return Off

    for name in KINDS["huggingface"].auto:  # every engine auto tries gets one id wrong
        monkeypatch.setitem(engines._ENGINES, name, off(engines._ENGINES[name]))
    choice = self_check.choose_backend("auto", tok, corpus)
    assert choice.name == "tokenizers" and choice.parity["result"] == "fallback"
    assert "different from tokenizers's" in choice.parity["reason"]
    assert [c["result"] for c in choice.parity["checks"]] == ["mismatch"] * len(KINDS["huggingface"].auto)
    with pytest.raises(ValueError, match="--tokenizer_backend tokenizers_batch"):
        self_check.choose_backend("tokenizers_batch", tok, corpus)


# --- the workers' encoder ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["huggingface", "tiktoken"])
def test_the_workers_encoder_pickles_as_its_settings_and_gives_the_reference_ids(kinds, kind):
    tok = load_tokenizer(kinds[kind])
    encoder = Encoder(kinds[kind], KINDS[kind].fast[0], sha256=tok.sha256, verify=True, threads=1)
    texts = real_documents()[:2] + _fuzz(3, 50)
    ids, offsets, mismatches = encoder.encode_verified(texts)
    assert mismatches == [] and np.array_equal(ids, tok.encode(texts)[0])
    copy = pickle.loads(pickle.dumps(encoder))
    assert copy.tokenizer is None and len(pickle.dumps(encoder)) < 1000
    assert copy.encode(["hello world"]) == [tok.encode_one("hello world")]
    stale = Encoder(kinds[kind], KINDS[kind].fast[0], sha256="0" * 64)
    with pytest.raises(TokenizerFileError, match="changed"):
        stale.load()


def test_verification_reports_each_document_whose_ids_differ(kinds, monkeypatch):
    class Off(engines.TiktokenBatchEngine):
        def encode(self, texts):
            ids, offsets = super().encode(texts)
            ids = ids.copy()
            for k in range(len(texts)):
                if "two" in texts[k] and offsets[k + 1] > offsets[k]:
                    ids[offsets[k]] = 0
            return ids, offsets

    monkeypatch.setitem(engines._ENGINES, "tiktoken_batch", Off)
    encoder = Encoder(kinds["tiktoken"], "tiktoken_batch", verify=True)
    _, _, mismatches = encoder.encode_verified(["one", "zz two", "three"])
    assert [i for i, _ in mismatches] == [1]
    assert "tiktoken_batch ids differ from tiktoken's from token 0" in mismatches[0][1]


# --- more than 65,536 ids -------------------------------------------------------------------------------

def test_a_hugging_face_tokenizer_with_more_than_65536_ids(bpe, tmp_path):
    path = tmp_path / "big" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(shifted_hf_json(bpe))
    tok = load_tokenizer(str(path))
    assert tok.vocab_size > 70_000
    text = real_documents()[0][:30_000]
    ids = tok.encode_one(text)
    assert max(ids) > 65_535 and tok.decode(ids) == text
    fast = load_engine("tokenizers_batch", tok)
    assert fast.encode([text])[0].tolist() == ids


# --- the boundary policy and locations ----------------------------------------------------------------

def test_the_boundary_policy_takes_the_tokenizers_ids_or_the_flags(kinds, bpe, tmp_path):
    neox = load_tokenizer(kinds["huggingface"])
    ids = neox.special_ids(add_bos=False, add_eos=True)
    assert (ids.eos_id, ids.separator_id, ids.vocab_size) == (bpe.token_to_id(ENDOFTEXT),) * 2 + (2000,)
    tik = load_tokenizer(kinds["tiktoken"])
    assert tik.special_ids(add_bos=False, add_eos=True).eos_id == tik.vocab_size - 1
    with pytest.raises(ValueError, match="no BOS id .*ranks file's JSON.*--bos_id N"):
        tik.special_ids(add_bos=True, add_eos=True)
    assert tik.special_ids(add_bos=True, add_eos=True, bos_id=5, allow_text=True).bos_id == 5
    bare = load_tokenizer(str(write_hf_directory(bpe, tmp_path / "bare", config=False)))
    with pytest.raises(ValueError, match="no EOS id .*tokenizer_config.json.*--eos_id N"):
        bare.special_ids(add_bos=False, add_eos=True)
    assert bare.special_ids(add_bos=False, add_eos=True, eos_id=1).padding_id == 1
    with pytest.raises(ValueError, match="--eos_id=2000 is outside"):
        bare.special_ids(add_bos=False, add_eos=True, eos_id=2000)
    spm_ids = load_tokenizer(kinds["sentencepiece"]).special_ids(add_bos=True, add_eos=True)
    assert (spm_ids.bos_id, spm_ids.eos_id) == (1, 2)


def test_tokenizers_load_from_fsspec_locations(kinds):
    import fsspec

    fs = fsspec.filesystem("memory")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        fs.pipe(f"/hf/{name}", open(f"{kinds['huggingface']}/{name}", "rb").read())
    for name in ("r.tiktoken", "r.tiktoken.json"):
        source = kinds["tiktoken"] + (".json" if name.endswith(".json") else "")
        fs.pipe(f"/tk/{name}", open(source, "rb").read())
    hf = load_tokenizer("memory://hf")
    assert hf.kind == "huggingface" and hf.eos_id >= 0 and set(hf.files) == {"tokenizer.json", "tokenizer_config.json"}
    assert hf.sha256 == load_tokenizer(kinds["huggingface"]).sha256
    tk = load_tokenizer("memory://tk/r.tiktoken")
    assert tk.kind == "tiktoken" and tk.encode_one("hello world") == load_tokenizer(kinds["tiktoken"]).encode_one(
        "hello world")
    assert detect_kind("memory://hf") == "huggingface"



EARLY = r"""
import json, sys
from pipeline.startup import early_check
from pipeline.tokenize import pieces, self_check
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.model import TokenizerModel
path, files = sys.argv[1], sys.argv[2:]
pile = self_check.documents.PILE
model = TokenizerModel.load(path)
early = early_check.EarlyChoice("auto", model, files, pile)
started = early._process is not None
choice = early.result("auto", model, files, pile)
adopted = len(pieces.CUTS.items())
reference = early_check.EarlyChoice(KINDS[model.kind].reference, model, files, pile)
other = early_check.EarlyChoice("auto", model, files, pile).result("auto", model, [], pile)
print(json.dumps({"started": started, "choice": choice.to_json(), "adopted": adopted,
                  "reference_starts": reference._process is not None, "other_inputs": other is None,
                  "inline": self_check.choose_backend("auto", model.tokenizer, files).to_json()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huggingface", "tiktoken"])
def test_the_self_check_of_a_kind_starts_early_and_is_the_drivers_own(kinds, corpus, kind):
    # In a fresh interpreter (a command's state when it starts): the check forked before Beam's import
    # gives exactly the choice the driver would make; asked about other inputs, it gives none.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", EARLY, kinds[kind], *corpus], capture_output=True, text=True,
                         cwd=repo, env={**os.environ, "PYTHONPATH": repo}, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["started"] and got["other_inputs"] and not got["reference_starts"]
    for choice in (got["choice"], got["inline"]):
        for check in choice["parity"]["checks"]:
            check.pop("seconds")  # how long the check took
    assert got["choice"] == got["inline"] and got["choice"]["name"] == KINDS[kind].auto[0]
    assert got["adopted"] > 0  # the safe cuts the check proved, taken by the driver
