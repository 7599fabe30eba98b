"""What every kind of tokenizer in kinds/registry.py promises, checked on a small tokenizer of each kind.

Adding a kind (docs/extending.md, "How to add a tokenizer kind") is adding its writer to
`WRITERS`: the kind's file is detected from its bytes; every engine of its row gives the
reference's ids (special-token strings as text) on the self-check's adversarial strings and real
text, alone and with long texts cut in pieces; the self-check picks or falls back with a reason;
an ordinary token as a boundary is refused unless allowed (--allow_text_eos); the workers' encoder
pickles small and loads what the driver checked.
"""

import os
import pickle

import numpy as np
import pytest
from kind_fixtures import real_documents, train_byte_level_bpe, write_hf_directory, write_ranks

from pipeline.tokenize import engines, self_check
from pipeline.tokenize.kinds.detect import detect_kind, load_tokenizer
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.model import TokenizerModel
from pipeline.tokenize.pieces import PieceEncoder

pytestmark = pytest.mark.slow  # trains a tokenizer of each kind and runs every engine: seconds each
_REQUIRED = os.environ.get("PILE_REQUIRE_FAST_BACKENDS") == "1"
REAL = real_documents()


@pytest.fixture(scope="module")
def bpe():
    return train_byte_level_bpe(1000)


# kind -> a writer of a small tokenizer of that kind: (tmp_path, tiny_model, bpe) -> its location.
WRITERS = {
    "sentencepiece": lambda tmp, tiny_model, bpe: tiny_model,
    "huggingface": lambda tmp, tiny_model, bpe: str(write_hf_directory(bpe, tmp / "hf")),
    "tiktoken": lambda tmp, tiny_model, bpe: str(write_ranks(bpe, tmp / "r.tiktoken")),
}


def test_every_kind_has_a_tokenizer_to_check():
    assert set(WRITERS) == set(KINDS)


def _engine(backend, tok):
    if not _REQUIRED and engines.package_version(backend) is None:
        pytest.skip(f"{backend} is not installed")
    return engines.load_engine(backend, tok, threads=1)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_kind_keeps_the_contract(kind, tmp_path, tiny_model, bpe):
    path = WRITERS[kind](tmp_path, tiny_model, bpe)
    assert detect_kind(path) == kind
    tok = load_tokenizer(path)
    row = KINDS[kind]
    assert tok.kind == kind and row.reference in row.backends and set(row.auto) <= set(row.fast)
    texts = self_check.check_texts(tok, long_line=1 << 12) + [doc[:5000] for doc in REAL]
    want = engines.load_engine(row.reference, tok).encode(texts)
    assert np.array_equal(want[0], tok.encode(texts)[0])  # the reference engine is the tokenizer's own encode
    assert not set(tok.encode(list(tok.special_tokens))[0].tolist()) & set(tok.special_tokens.values())
    for backend in (row.reference, *row.fast):
        engine = _engine(backend, tok)
        got = engine.encode(texts)
        assert engines.mismatched(want, got) == [], backend
        pieces = PieceEncoder(engine, tok, long_chars=0, piece_chars=500, batch_chars=20_000)
        long = ["\n\n".join(REAL)[:200_000]]
        assert np.array_equal(pieces.encode(long)[0], engine.encode(long)[0]), (backend, pieces.reason)
    choice = self_check.choose_backend("auto", tok, [])
    assert choice.parity["result"] in ("passed", "fallback") and choice.name in row.backends
    assert choice.parity["result"] == "passed" or choice.parity["reason"]
    model = TokenizerModel.load(path)
    ordinary = tok.encode_one("hello")[0]  # text produces it: a boundary only with --allow_text_eos
    with pytest.raises(ValueError, match=f"--eos_id {ordinary}: .* is an ordinary token .*--allow_text_eos"):
        model.special_ids(add_bos=False, add_eos=True, eos_id=ordinary)
    # Id 0 as EOS whatever the kind (an ordinary token of some: allowed here, refused by default).
    spec = model.spec(choice, model.special_ids(add_bos=False, add_eos=True, eos_id=0, allow_text=True))
    encoder = spec.encoder(verify=True, threads=1)
    assert len(pickle.dumps(spec)) < 2000 and len(pickle.dumps(encoder)) < 1000
    ids, _, mismatches = pickle.loads(pickle.dumps(encoder)).encode_verified(texts[:50])
    assert mismatches == [] and np.array_equal(ids, want[0][: want[1][50]])
