"""Long documents of Hugging Face and tiktoken tokenizers in pieces: exactly the whole document's ids
(pipeline/tokenize/pieces.py with kinds/byte_level.py's cuts), on real text and fuzzed text, for byte-level
BPEs trained here with the split patterns people use (GPT-2's, cl100k, o200k, Llama 3), and tokenizers
that must not be cut."""

import json
import random

import numpy as np
import pytest
from kind_fixtures import ENDOFTEXT, real_documents, train_byte_level_bpe, write_hf_directory, write_ranks

from pipeline.tokenize import pieces
from pipeline.tokenize.encoder import Encoder
from pipeline.tokenize.engines import ReferenceEngine, load_engine
from pipeline.tokenize.kinds import tiktoken_bpe
from pipeline.tokenize.kinds.byte_level import BPE_SELF_TEST_TEXTS, CUT_RULES
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.pieces import PieceEncoder, check_cuts

REAL = real_documents()
ALPHABET = ["\n", "\n", " ", " ", "  ", "\r\n", "\t", "a", "b", "Z", "1", "7", ".", ",", "'s", "é", "e\u0301", "数据",
            "🙂", ENDOFTEXT, "<s>", "\u2028", "\u00a0", "\x00", "word", "the ", "\n    ", "x\n", "Σ", "://"]


def _fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 150))) for _ in range(count)]


ADVERSARIAL = [*BPE_SELF_TEST_TEXTS, *_fuzz(0, 400), "a b" * 2000, "x\ny" * 2000, "\n".join(["  "] * 300),
               " \n".join(["word"] * 300), ".\n".join(["word"] * 300)]


@pytest.fixture(scope="module")
def bpe():
    return train_byte_level_bpe(3000)


@pytest.fixture(scope="module")
def tokenizers(bpe, tmp_path_factory):
    """name -> a loaded tokenizer: GPT-NeoX-style tokenizer.json, Llama-3-style tokenizer.json, tiktoken files."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers

    root = tmp_path_factory.mktemp("pieces")
    out = {"tokenizer.json, GPT-NeoX style": load_tokenizer(str(write_hf_directory(bpe, root / "neox")))}
    llama = Tokenizer.from_str(bpe.to_str())
    llama.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(tiktoken_bpe.LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    llama_dir = write_hf_directory(llama, root / "llama")
    spec = json.loads((llama_dir / "tokenizer.json").read_text())
    spec["model"]["ignore_merges"] = True  # as Llama 3's: a pre-token in the vocabulary is one token
    (llama_dir / "tokenizer.json").write_text(json.dumps(spec))
    out["tokenizer.json, Llama-3 style"] = load_tokenizer(str(llama_dir))
    for name, pattern in (("cl100k", tiktoken_bpe.CL100K_PATTERN), ("o200k", tiktoken_bpe.O200K_PATTERN),
                          ("llama3", tiktoken_bpe.LLAMA3_PATTERN), ("r50k", tiktoken_bpe.R50K_PATTERN)):
        path = write_ranks(bpe, root / f"{name}.tiktoken", pattern=pattern)
        out[f"tiktoken, {name} pattern"] = load_tokenizer(str(path))
    return out


def _assert_same_ids(encoder, reference, texts):
    ids, offsets = encoder.encode(texts)
    whole, whole_offsets = reference.encode(texts)
    for i, text in enumerate(texts):
        got, want = ids[offsets[i] : offsets[i + 1]], whole[whole_offsets[i] : whole_offsets[i + 1]]
        assert np.array_equal(got, want), f"text {i} ({text[:40]!r}...): ids differ from the whole encode"


NAMES = ["tokenizer.json, GPT-NeoX style", "tokenizer.json, Llama-3 style", "tiktoken, cl100k pattern",
         "tiktoken, o200k pattern", "tiktoken, llama3 pattern", "tiktoken, r50k pattern"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_pieces_have_the_ids_of_the_whole_document(tokenizers, name):
    tok = tokenizers[name]
    reference = ReferenceEngine(tok)
    for backend in KINDS[tok.kind].backends[:-1]:
        engine = load_engine(backend, tok, threads=1)
        for piece_chars in (3, 1000):
            encoder = PieceEncoder(engine, tok, long_chars=0, piece_chars=piece_chars, batch_chars=50_000)
            assert (encoder.newlines, encoder.spaces) == (True, True), encoder.reason
            _assert_same_ids(encoder, reference, ADVERSARIAL)
            _assert_same_ids(encoder, reference, REAL if piece_chars == 1000 else [d[:20_000] for d in REAL])


@pytest.mark.slow
def test_a_long_real_document_through_the_workers_encoder(tokenizers, tmp_path):
    """Over the 1 MB limit: encoded in pieces of 256 K characters, with the ids of the whole text."""
    long_doc = "\n\n".join(REAL * 3)
    assert len(long_doc) > pieces.LONG_TEXT_CHARS
    for name, engine in [("tokenizer.json, GPT-NeoX style", "fast"), ("tiktoken, cl100k pattern", "fast"),
                         ("tokenizer.json, GPT-NeoX style", "reference")]:
        tok = tokenizers[name]
        backend = KINDS[tok.kind].fast[0] if engine == "fast" else KINDS[tok.kind].reference
        encoder = Encoder(tok.path, backend, sha256=tok.sha256, threads=1)
        ids, offsets = encoder.encode_flat(["short", long_doc])
        assert encoder._pieces.newlines and encoder._pieces.spaces  # noqa: SLF001
        assert CUT_RULES.cut_points(long_doc, pieces.PIECE_CHARS, newlines=True, spaces=True)
        assert ids[offsets[1] :].tolist() == tok.encode_one(long_doc)


def test_cuts_are_where_the_split_patterns_end_a_pre_token():
    text = "x\nword \nnext\n\nthird  fourth it's a b\n 5"
    cuts = CUT_RULES.cut_points(text, 1, newlines=True, spaces=False)
    assert [text[c - 2 : c + 1] for c in cuts] == ["x\nw"]  # not after " \n", "\n\n", or before a space
    cuts = CUT_RULES.cut_points(text, 1, newlines=False, spaces=True)
    # Not at a double space, nor before a newline.
    assert cuts == [text.index(" it"), text.index(" a b"), text.index(" b\n")]
    assert CUT_RULES.cut_points("aaaa\nbb cc dd", 6, newlines=True, spaces=True) == [5, 10]
    assert CUT_RULES.cut_points("a" * 50, 10, newlines=True, spaces=True) == []


def _hf(bpe, tmp_path, name, change):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(bpe.to_str())
    change(tok)
    return load_tokenizer(str(write_hf_directory(tok, tmp_path / name)))


def test_tokenizers_that_depend_on_where_a_text_starts_are_not_cut(bpe, tmp_path):
    from tokenizers import decoders, normalizers, pre_tokenizers

    def prefix_space(tok):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)

    def metaspace(tok):
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()

    def prepend(tok):
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])

    for name, change, why in (("prefix", prefix_space, "add_prefix_space"), ("meta", metaspace, "Metaspace"),
                              ("prepend", prepend, "Prepend")):
        tok = _hf(bpe, tmp_path, name, change)
        engine = ReferenceEngine(tok)
        newlines, spaces, reason = check_cuts(engine, tok)
        assert (newlines, spaces) == (False, False) and why in reason
        encoder = PieceEncoder(engine, tok, long_chars=0, piece_chars=5)
        _assert_same_ids(encoder, engine, REAL[:2] + ADVERSARIAL[:30])


def test_a_token_across_a_cut_turns_that_cut_off(bpe, tmp_path):
    tok = _hf(bpe, tmp_path, "added", lambda t: t.add_tokens(["line\nnext", "two words"]))
    engine = ReferenceEngine(tok)
    newlines, spaces, reason = check_cuts(engine, tok)
    assert (newlines, spaces) == (False, False)
    assert "line\\nnext" in reason and "two words" in reason
    text = "a line\nnext and two words\n" * 50
    encoder = PieceEncoder(engine, tok, long_chars=0, piece_chars=5)
    _assert_same_ids(encoder, engine, [text])


def test_the_self_test_catches_what_the_rules_miss(tokenizers, monkeypatch):
    """An engine whose first token depends on where a text starts: the self-test turns the cuts off."""
    tok = tokenizers["tiktoken, cl100k pattern"]

    class StartMarked(ReferenceEngine):
        def encode(self, texts):
            return super().encode(["\u00a7" + t for t in texts])

    monkeypatch.setattr(pieces, "CUTS", type(pieces.CUTS)(8))
    newlines, spaces, reason = check_cuts(StartMarked(tok), tok)
    assert (newlines, spaces) == (False, False) and "change the ids" in reason
