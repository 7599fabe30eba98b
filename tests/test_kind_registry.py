"""A tokenizer kind is one class and one registry row: a kind of the test's own, registered at run time, works.

Detection asks every row (kinds/detect.py), the class loads its files, its reference is the
tokenizer's own encode (engines.py's `ReferenceEngine`), the self-check and the workers' encoder
take it, and its special ids and manifest facts come from the class: nothing else names the kind.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from pipeline.tokenize import engines, self_check
from pipeline.tokenize.kinds import byte_level, registry
from pipeline.tokenize.kinds.base import AUTO, Tokenizer, TokenizerFileError, TokenizerFiles, flatten
from pipeline.tokenize.kinds.detect import detect_kind, kind_of, load_tokenizer
from pipeline.tokenize.model import TokenizerModel

MAGIC = b"#utf8-bytes tokenizer\n"
EOS = "<|eos|>"


class ByteTokenizer(Tokenizer):
    """Each UTF-8 byte its own id; one special token, <|eos|> = 256, named in the file after the magic line."""

    kind = "utf8_bytes"
    described = "a UTF-8 bytes tokenizer"
    label = "bytes"
    reference = "utf8_bytes"
    reference_name = "the bytes' own"
    package = "numpy"
    cuts = byte_level.CUT_RULES
    specials_looked_for = "{role} in the file's second line"

    def __init__(self, path: str, data: bytes):
        if data[len(MAGIC):].strip() != EOS.encode():
            raise TokenizerFileError(f"{path}: no {EOS} line")
        self.path, self.sha256 = path, hashlib.sha256(data).hexdigest()
        self.files = {"bytes.tok": self.sha256}
        self.vocab_size, self.eos_id = 257, 256
        self.special_sources = {"eos": "the file's second line"}
        self.special_tokens = {EOS: 256}

    @classmethod
    def looks_like(cls, data: bytes, parsed: dict | None) -> bool:
        return parsed is None and data.startswith(MAGIC)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return flatten([list(text.encode("utf-8", "surrogatepass")) for text in texts])

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if i < 256).decode("utf-8", "replace")

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}


@pytest.fixture
def bytes_kind(monkeypatch, tmp_path) -> str:
    monkeypatch.setitem(registry.KINDS, ByteTokenizer.kind, ByteTokenizer)  # its one registry row
    path = tmp_path / "bytes.tok"
    path.write_bytes(MAGIC + EOS.encode() + b"\n")
    return str(path)


def test_a_kind_of_ones_own_is_detected_loaded_checked_and_encoded(bytes_kind):
    assert ByteTokenizer.backends == ("utf8_bytes", AUTO)
    assert detect_kind(bytes_kind) == "utf8_bytes"
    tok = load_tokenizer(bytes_kind)
    assert isinstance(tok, ByteTokenizer) and tok.path == bytes_kind
    engine = engines.load_engine("utf8_bytes", tok, threads=1)  # the tokenizer's own encode: no table entry
    assert isinstance(engine, engines.ReferenceEngine) and engine.encode(["é"])[0].tolist() == [0xC3, 0xA9]
    assert f"tokenizer backend 'gigatoken' does not encode {tok.kind}" in _unavailable("gigatoken", tok)
    choice = self_check.choose_backend(AUTO, tok, [])  # no fast engine: the reference, with the reason
    assert (choice.name, choice.version, choice.parity["result"]) == ("utf8_bytes", np.__version__, "fallback")
    model = TokenizerModel.load(bytes_kind)
    special = model.special_ids(add_bos=False, add_eos=True)
    assert special.eos_id == 256 and model.facts()["kind"] == "utf8_bytes"
    with pytest.raises(ValueError, match=r"has no BOS id \(looked for bos in the file's second line\)"):
        model.special_ids(add_bos=True, add_eos=True)
    with pytest.raises(TokenizerFileError, match="not a tiktoken ranks file: --tiktoken_encoding llama3"):
        load_tokenizer(bytes_kind, tiktoken_name="llama3")
    encoder = pickle.loads(pickle.dumps(model.spec(choice, special).encoder(verify=True, threads=1)))
    ids, offsets, mismatches = encoder.encode_verified(["hi", EOS])
    assert ids.tolist() == [104, 105, *EOS.encode()] and offsets.tolist() == [0, 2, 2 + len(EOS)]
    assert mismatches == []  # the reference is never checked against itself


def _unavailable(backend: str, tok: Tokenizer) -> str:
    with pytest.raises(engines.BackendUnavailable) as refused:
        engines.load_engine(backend, tok)
    return str(refused.value)


def test_without_its_row_the_kind_is_unknown(tmp_path):
    path = tmp_path / "bytes.tok"
    path.write_bytes(MAGIC + EOS.encode() + b"\n")
    with pytest.raises(TokenizerFileError, match="not a tokenizer file of a known kind; expected a SentencePiece"):
        load_tokenizer(str(path))


def test_detection_asks_every_row_and_names_every_kind():
    with pytest.raises(TokenizerFileError) as refused:
        kind_of("x.json", b'{"not": "a tokenizer"}')
    assert str(refused.value) == (
        "x.json: JSON but not a tokenizer file of a known kind (pass the tokenizer.json, or the directory that "
        "holds it); expected a SentencePiece .model, a Hugging Face tokenizer.json (or a directory holding one) "
        "or a tiktoken BPE ranks file")
    # A JSON file never reads as a SentencePiece model, whatever its first byte.
    with pytest.raises(TokenizerFileError, match="JSON but not"):
        kind_of("x.json", b'\n{"model": 1}')


def test_fast_engines_are_the_engines_that_are_packages_of_their_own():
    assert engines.FAST_BACKENDS == ("gigatoken", "kitoken")
    assert engines.package_version("tokenizers_batch") == engines.package_version("tokenizers")
    assert engines.package_version(AUTO) is None


def test_the_files_beside_the_main_one(tmp_path):
    (tmp_path / "a.json").write_bytes(b"{}")
    read = {str(tmp_path / "a.json"): b"{}"}.get
    files = TokenizerFiles("shown", str(tmp_path / "main"), b"", read)
    assert files.beside("a.json") == b"{}" and files.beside("b.json") is None
    assert TokenizerFiles("shown", "main", b"", {"a.json": b"1"}.get).beside("a.json") == b"1"
