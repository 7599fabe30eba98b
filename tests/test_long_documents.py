"""Long SentencePiece documents encoded in pieces give exactly the ids of the whole document
(pipeline/tokenize/pieces.py with kinds/sp_model.py's cuts).

Proved on real text (Python's own documentation and sources, which every Python install has) and on
adversarial text (newline, space and marker patterns, fuzzed), for the bundled Llama-2-style model,
the tests' tiny model, models whose newlines or spaces are not safe to cut at, and the fast engines.
Pieces are made small here (tens to thousands of characters) so that every document is cut often.
"""

import inspect
import io
import json
import random

import numpy as np
import pytest
import sentencepiece as spm
from sample_corpus import compose_lines

from pipeline.tokenize import engines
from pipeline.tokenize.encoder import Encoder
from pipeline.tokenize.engines import BackendUnavailable, SentencePieceEngine
from pipeline.tokenize.kinds.base import SELF_TEST_TEXTS
from pipeline.tokenize.kinds.sp_model import CUT_RULES, SentencePieceTokenizer
from pipeline.tokenize.pieces import PieceEncoder, check_cuts

SAMPLE_MODEL = "tokenizers/sample/sample.model"


def _real_documents() -> list[str]:
    """Real text, a few hundred KB: Python's documentation topics and some large stdlib modules."""
    import argparse
    import collections
    import email._header_value_parser as header_parser
    import typing

    docs = [inspect.getsource(m) for m in (argparse, typing, collections, header_parser)]
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a stripped Python: the sources above are still real text
        topics = {}
    names = sorted(topics)
    docs += ["\n\n".join(topics[n] for n in names[i::3]) for i in range(3)]
    return docs


REAL = _real_documents()


def _fuzz(seed: int, count: int) -> list[str]:
    alphabet = ["\n", "\n", " ", " ", "  ", "\r\n", "\t", "a", "b", "Z", "1", "7", ".", "▁", "é", "e\u0301",
                "数据", "🙂", "<s>", "</s>", "\u2028", "\u200b", "\x00", "word", "the ", "\n    "]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))) for _ in range(count)]


ADVERSARIAL = [*SELF_TEST_TEXTS, *_fuzz(0, 400),
               "\n" * 50, " " * 50, "a" * 5000, "a b" * 2000, "x\n" * 2000, "\n".join(["  "] * 300)]


def _model(vocab_size: int, **settings) -> bytes:
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(3), 150)]
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts + REAL[0].split("\n\n")), model_writer=out,
                                   vocab_size=vocab_size, byte_fallback=True, character_coverage=0.9995,
                                   max_sentence_length=1 << 20, num_threads=1, minloglevel=2, **settings)
    return out.getvalue()


@pytest.fixture(scope="module")
def models(tiny_model) -> dict[str, SentencePieceTokenizer]:
    with open(SAMPLE_MODEL, "rb") as f, open(tiny_model, "rb") as g:
        out = {"sample (Llama-2 style)": f.read(), "tiny": g.read()}
    out["unigram, nmt_nfkc"] = _model(600, model_type="unigram", normalization_rule_name="nmt_nfkc")
    # Enough merges for pieces across words ("▁of▁the").
    out["bpe, split_by_whitespace=false"] = _model(1000, model_type="bpe", split_by_whitespace=False,
                                                   normalization_rule_name="identity", remove_extra_whitespaces=False)
    return {name: SentencePieceTokenizer(f"{name}.model", proto) for name, proto in out.items()}


def _assert_same_ids(encoder: PieceEncoder, engine, texts: list[str]) -> None:
    ids, offsets = encoder.encode(texts)
    whole, whole_offsets = engine.encode(texts)
    for i, text in enumerate(texts):
        got, want = ids[offsets[i] : offsets[i + 1]], whole[whole_offsets[i] : whole_offsets[i + 1]]
        assert np.array_equal(got, want), f"text {i} ({text[:40]!r}...): ids differ from the whole encode"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sample (Llama-2 style)", "tiny", "unigram, nmt_nfkc",
                                  "bpe, split_by_whitespace=false"])
def test_pieces_have_the_ids_of_the_whole_document(models, name):
    tok = models[name]
    engine = SentencePieceEngine(tok, threads=1)
    for piece_chars in (3, 1000):
        encoder = PieceEncoder(engine, tok, long_chars=0, piece_chars=piece_chars, batch_chars=50_000)
        _assert_same_ids(encoder, engine, ADVERSARIAL)
        _assert_same_ids(encoder, engine, REAL if piece_chars == 1000 else [d[:20_000] for d in REAL])
    # What each model allows: Llama-2-style models cut at newlines and spaces; the tiny model has
    # pieces "\n\n" and ".\n\n", nmt_nfkc turns newlines into spaces; split_by_whitespace=false
    # makes pieces across both (its documents are encoded whole, still with the right ids).
    expected = {"sample (Llama-2 style)": (True, True), "tiny": (False, True), "unigram, nmt_nfkc": (False, True),
                "bpe, split_by_whitespace=false": (False, False)}[name]
    assert (encoder.newlines, encoder.spaces) == expected, encoder.reason


@pytest.mark.parametrize("backend", ["gigatoken", "kitoken"])
def test_fast_engines_in_pieces_match_sentencepiece_on_the_whole_document(models, backend):
    tok = models["sample (Llama-2 style)"]
    try:
        fast = engines.load_engine(backend, tok, threads=1)
    except BackendUnavailable as e:
        pytest.skip(str(e))
    reference = SentencePieceEngine(tok, threads=1)
    encoder = PieceEncoder(fast, tok, long_chars=0, piece_chars=700, batch_chars=50_000)
    _assert_same_ids(encoder, reference, REAL + ADVERSARIAL[:50])


def test_only_texts_over_the_limit_are_cut_and_the_encoder_uses_pieces(models, tmp_path):
    tok = models["sample (Llama-2 style)"]
    calls = []

    class Recording(SentencePieceEngine):
        def encode(self, texts):
            calls.append([len(t) for t in texts])
            return super().encode(texts)

    engine = Recording(tok, threads=1)
    encoder = PieceEncoder(engine, tok, long_chars=30_000, piece_chars=8_000, batch_chars=20_000)
    calls.clear()
    long_doc = REAL[0] * 2
    _assert_same_ids(encoder, SentencePieceEngine(tok, threads=1), ["short one", long_doc, "another"])
    # The short texts in one call, then the long one in batches of pieces, none over 20k characters.
    assert calls[0] == [9, 7]
    assert all(sum(c) <= 20_000 + 8_001 and max(c) <= 8_000 + 2_000 for c in calls[1:])
    assert sum(sum(c) for c in calls[1:]) >= len(long_doc)
    # The worker's Encoder wraps its engine the same way (default limits: 1 MB).
    model = tmp_path / "m.model"
    model.write_bytes(tok.proto)
    worker = Encoder(str(model), "sentencepiece", threads=1)
    worker.load()
    assert isinstance(worker._pieces, PieceEncoder) and worker._pieces.newlines  # noqa: SLF001


def test_cut_points_prefer_newlines_and_fall_back_to_spaces():
    text = "a" * 10 + "\n" + "word " * 10 + "x"
    assert CUT_RULES.cut_points(text, 12, newlines=True, spaces=True)[0] == (11, False)
    cuts = CUT_RULES.cut_points("ab cd ef gh", 4, newlines=True, spaces=True)
    assert cuts == [(2, True), (5, True), (8, True)]
    assert CUT_RULES.cut_points("abcdefgh", 3, newlines=True, spaces=True) == []  # nowhere safe: one piece
    assert CUT_RULES.cut_points("abc\n", 2, newlines=True, spaces=False) == []  # a newline at the end cuts nothing


def test_a_model_that_fails_the_self_test_encodes_whole(models):
    tok = models["sample (Llama-2 style)"]

    class Wrong(SentencePieceEngine):
        """Ids that depend on where a text starts: what an unsafe cut would expose."""

        def encode(self, texts):
            ids, offsets = super().encode(texts)
            ids = ids.copy()
            for i, t in enumerate(texts):
                if t.startswith("\n") and offsets[i + 1] > offsets[i] + 2:
                    ids[offsets[i] + 2] += 1
            return ids, offsets

    newlines, spaces, reason = check_cuts(Wrong(tok, threads=1), tok)
    assert not newlines and spaces and "newlines cuts change the ids" in reason
