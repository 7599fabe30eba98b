"""Tokenizer backends: parity with SentencePiece, the self-check and its fallback, static model checks."""

import ctypes
import json
import os
import pickle
import platform
import random
import subprocess
import sys
import threading

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import pile_line, write_lines
from sample_corpus import compose_lines

from pipeline.core import packing
from pipeline.core.memo import ProcessMemo
from pipeline.tokenize import engines, self_check
from pipeline.tokenize.encoder import Encoder
from pipeline.tokenize.kinds import registry, sp_facts, sp_model
from pipeline.tokenize.kinds.sp_model import SentencePieceTokenizer

# CI sets PILE_REQUIRE_FAST_BACKENDS=1 so that a missing engine fails the parity tests instead of skipping them.
_REQUIRED = os.environ.get("PILE_REQUIRE_FAST_BACKENDS") == "1"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = [pytest.param(name, marks=pytest.mark.skipif(not _REQUIRED and engines.package_version(name) is None,
                                                    reason=f"{name} not installed"))
        for name in engines.FAST_BACKENDS]

# Characters that part engines from SentencePiece on some models (whitespace of every kind, controls,
# combining marks, normalization-sensitive forms, byte-fallback characters, specials as text).
_POOL = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 .,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`") + [
    " ", "  ", "\t", "\n", "\r\n", "\x00", "\x01", "\x7f", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b",
    "\ufeff", "\u0301", "\u0308", "é", "ß", "İ", "ﬁ", "①", "Ａ", "数", "据", "日本", "한", "\u1100\u1161", "𠀀",
    "\ue000", "\ufffd", "😀", "👩‍👩‍👧", "🇺🇸", "\U0010fffd", "мир", "العالم", "नमस्ते", "<s>", "</s>", "<unk>",
    "<0x41>", "▁", "⁇", "１２３", "١٢٣",
]


def _fuzz(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_POOL) for _ in range(rng.choice((1, 2, 5, 20, 100, 600)))) for _ in range(n)]


def _train(path, **overrides) -> str:
    """A small Llama-2-style model (identity normalization, byte fallback, split digits), with overrides."""
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(11), 120)]
    args = dict(model_type="bpe", vocab_size=400, byte_fallback=True, split_digits=True,
                normalization_rule_name="identity", remove_extra_whitespaces=False,
                allow_whitespace_only_pieces=True, max_sentence_length=1 << 20, num_threads=1, minloglevel=2)
    args.update(overrides)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(path), **args)
    return f"{path}.model"


def _sp_ids(model: str, texts: list[str]) -> list[list[int]]:
    return spm.SentencePieceProcessor(model_file=model).encode(texts)


def _tokenizer(proto: bytes) -> SentencePieceTokenizer:
    return SentencePieceTokenizer("m.model", proto)


def _only_auto(monkeypatch, *names):
    """`auto` tries only these engines for a SentencePiece model."""
    monkeypatch.setattr(registry.KINDS["sentencepiece"], "auto", names)


@pytest.fixture(scope="module")
def nfkc_model(tmp_path_factory) -> str:
    """SentencePiece's default normalization (nmt_nfkc, extra whitespace removed): no fast backend may be used."""
    return _train(tmp_path_factory.mktemp("nfkc") / "nfkc", normalization_rule_name="nmt_nfkc",
                  remove_extra_whitespaces=True)


@pytest.fixture
def no_fast_backends(monkeypatch):
    """Every fast backend's package fails to import, as when it is not installed."""
    for name in ("gigatoken", "kitoken", "awkward"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError


# --- Parity on adversarial text (the Llama-2-style settings the fast backends are for).


@pytest.mark.parametrize("backend", FAST)
def test_parity_on_adversarial_text(backend, tiny_model):
    """Literal specials, byte fallback, NULs, lone combining marks, 1 MB lines, digits, mixed scripts."""
    facts = sp_facts.ModelFacts.from_proto(open(tiny_model, "rb").read())
    assert sp_facts.model_problems(backend, facts) == []
    texts = self_check.check_texts(_tokenizer(open(tiny_model, "rb").read()), long_line=1 << 20)
    assert max(len(t) for t in texts) >= 1 << 20
    encoder = Encoder(tiny_model, backend)
    got = encoder.encode(texts)
    want = _sp_ids(tiny_model, texts)
    assert [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b] == []


@pytest.mark.parametrize("backend", FAST)
def test_parity_on_fuzzed_text(backend, tiny_model):
    texts = _fuzz(0, 3000)
    assert Encoder(tiny_model, backend).encode(texts) == _sp_ids(tiny_model, texts)


@pytest.mark.parametrize("backend", FAST)
def test_literal_special_tokens_are_text(backend, tiny_model):
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    encoder = Encoder(tiny_model, backend)
    for text in ["<s>", "</s>", "<unk>", "a <s> b </s> c", "<s><s></s>"]:
        ids = encoder.encode([text])[0]
        assert ids == sp.encode(text)
        assert sp.bos_id() not in ids and sp.eos_id() not in ids and sp.unk_id() not in ids


@pytest.mark.parametrize("backend", FAST)
def test_flat_encoding_matches_lists(backend, tiny_model):
    texts = ["", "a", "hello world", "", "数据 123"]
    ids, offsets = Encoder(tiny_model, backend).encode_flat(texts)
    assert ids.dtype == np.int32 and offsets.dtype == np.int64 and offsets[0] == 0
    want = _sp_ids(tiny_model, texts)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)] == want
    assert Encoder(tiny_model, backend).encode_flat([])[1].tolist() == [0]


class _MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _malloc_in_use() -> int:
    """Bytes the process holds from malloc (every arena and mapped block): what a cache would keep."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


@pytest.mark.skipif(not _REQUIRED and engines.package_version("gigatoken") is None, reason="gigatoken not installed")
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's (CI runs Debian)")
def test_gigatoken_keeps_nothing_between_calls(tiny_model, monkeypatch):
    """One encoder takes every batch of a run: ever new words must not grow what it holds."""
    monkeypatch.setattr(engines, "_GIGATOKENS", ProcessMemo(2))
    encoder = Encoder(tiny_model, "gigatoken", threads=1)
    rng = np.random.default_rng(4)
    held = []
    for _ in range(12):
        texts = [" ".join(rng.integers(1 << 40, 1 << 48, 1000).astype(str)) for _ in range(130)]  # ~2 MB, new words
        ids, offsets = encoder.encode_flat(texts)
        del texts, ids, offsets
        held.append(_malloc_in_use())
    # A cache of the words of the last 8 batches would hold far more than their 16 MB of text.
    assert max(held[4:]) - max(held[:4]) < 2 << 20, [h >> 20 for h in held]


@pytest.mark.skipif(not _REQUIRED and engines.package_version("gigatoken") is None, reason="gigatoken not installed")
def test_gigatoken_encoders_of_a_process_share_one_and_threads_get_the_same_ids(tiny_model, monkeypatch):
    monkeypatch.setattr(engines, "_GIGATOKENS", ProcessMemo(2))
    encoders = [Encoder(tiny_model, "gigatoken", threads=1) for _ in range(4)]
    for encoder in encoders:
        encoder.load()
    assert len({id(e._engine._tok) for e in encoders}) == 1
    batches = [_fuzz(seed, 300) for seed in range(8)]
    want = [_sp_ids(tiny_model, texts) for texts in batches]
    got: dict = {}

    def work(k):
        for i in range(k, len(batches), len(encoders)):
            for _ in range(3):
                got.setdefault(i, []).append(encoders[k].encode(batches[i]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(encoders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[i] == [want[i]] * 3 for i in range(len(batches)))


# --- What each engine is known to get wrong is refused before any text is encoded.


def test_model_facts(tiny_model, nfkc_model):
    tiny = sp_facts.ModelFacts.from_proto(open(tiny_model, "rb").read())
    assert (tiny.model_type, tiny.byte_fallback, tiny.normalizer, tiny.has_charsmap) == ("bpe", True, "identity", False)
    assert not tiny.remove_extra_whitespaces and tiny.add_dummy_prefix and tiny.control_pieces == ("<s>", "</s>")
    nfkc = sp_facts.ModelFacts.from_proto(open(nfkc_model, "rb").read())
    assert nfkc.normalizer == "nmt_nfkc" and nfkc.has_charsmap and nfkc.remove_extra_whitespaces
    for garbage in (b"", b"\xff\xff", b"\x0a\x05ab"):
        with pytest.raises(ValueError, match="not a SentencePiece model"):
            sp_facts.ModelFacts.from_proto(garbage)


@pytest.mark.parametrize("settings", [
    {"normalization_rule_name": "nmt_nfkc"},
    {"normalization_rule_name": "nfkc"},
    {"remove_extra_whitespaces": True},
    {"split_by_whitespace": False},
    {"user_defined_symbols": ["<|im_start|>", "@@"]},
    {"byte_fallback": False},
    {"model_type": "unigram"},
    {"add_dummy_prefix": False},
    {},
])
def test_static_checks_cover_every_measured_mismatch(settings, tmp_path):
    """For each model setting: an engine either is refused up front or gives SentencePiece's ids."""
    model = _train(tmp_path / "m", **settings)
    proto = open(model, "rb").read()
    facts = sp_facts.ModelFacts.from_proto(proto)
    texts = self_check.check_texts(_tokenizer(proto), long_line=1 << 12) + _fuzz(2, 400)
    want = engines.SentencePieceEngine(_tokenizer(proto)).encode(texts)
    for backend in engines.FAST_BACKENDS:
        if (not _REQUIRED and engines.package_version(backend) is None) or sp_facts.model_problems(backend, facts):
            continue
        got = engines.load_engine(backend, _tokenizer(proto)).encode(texts)
        assert engines.mismatched(want, got) == [], (backend, settings)


def test_unsupported_model_is_refused_with_the_reason(nfkc_model):
    proto = open(nfkc_model, "rb").read()
    for backend in engines.FAST_BACKENDS:
        with pytest.raises(engines.BackendUnavailable, match="normalization 'nmt_nfkc'"):
            engines.load_engine(backend, _tokenizer(proto))


# --- choose_backend: the self-check in the driver.


def _corpus(tmp_path, n_files=3) -> list[str]:
    texts = _fuzz(3, 60) + ["literal <s> and </s> in text", "x" * 100_000, "1234567890" * 100]
    files = []
    for f in range(n_files):
        lines = [pile_line(t) for t in texts[f::n_files]] + [b"{bad json"]
        files.append(write_lines(str(tmp_path / "in" / f"{f:02d}.jsonl.zst"), lines))
    return files


@pytest.mark.parametrize("backend", FAST)
def test_auto_picks_a_fast_backend_after_the_self_check(backend, tiny_model, tmp_path, monkeypatch):
    _only_auto(monkeypatch, backend)
    choice = self_check.choose_backend("auto", tiny_model, _corpus(tmp_path))
    assert choice.name == backend and choice.version == engines.package_version(backend)
    parity = choice.parity
    assert parity["requested"] == "auto" and parity["result"] == "passed" and parity["mismatches"] == 0
    assert parity["documents"] == 63 and parity["files_sampled"] == 3 and parity["adversarial_strings"] > 100
    assert [c["backend"] for c in parity["checks"]] == [backend]
    json.dumps(choice.to_json())  # goes into the manifest


EARLY = """
import json, sys
from pipeline.startup import early_check
from pipeline.tokenize import encoder, self_check
model, files = sys.argv[1], sys.argv[2:]
pile = self_check.documents.PILE
early = early_check.EarlyChoice("auto", model, files[:1] + [files[1].rsplit("/", 1)[0] + "/0[12]*"], pile)
started = early._process is not None
choice = early.result("auto", model, files, pile)
proto = open(model, "rb").read()
built = encoder.derived()
adopted = [proto in built["facts"], any(key[1] == proto for key in built["cuts"])]
# Asked for other inputs than it checked: no result, the driver checks itself.
mismatch = early_check.EarlyChoice("auto", model, files, pile).result("auto", model, files[:2], pile)
stopped = early_check.EarlyChoice("auto", model, files, pile)
stopped.cancel()
print(json.dumps({"started": started, "choice": choice.to_json(), "adopted": adopted,
                  "converted": proto in built["converted"], "mismatch": mismatch is None,
                  "stopped": stopped.result("auto", model, files, pile) is None,
                  "inline": self_check.choose_backend("auto", model, files).to_json()}))
"""


@pytest.mark.slow
def test_the_self_check_started_early_is_the_drivers_own(tiny_model, tmp_path):
    # In a fresh interpreter (a command's state when it starts): the forked check gives exactly the
    # choice the driver would make, and its converted model; asked about other inputs, it gives none.
    files = _corpus(tmp_path)
    out = subprocess.run([sys.executable, "-c", EARLY, tiny_model, *files], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["started"] and got["mismatch"] and got["stopped"]
    for choice in (got["choice"], got["inline"]):
        for check in choice["parity"]["checks"]:
            check.pop("seconds")  # how long the check took
    assert got["choice"] == got["inline"] and got["choice"]["name"] != "sentencepiece"
    assert got["adopted"] == [True, True]  # what the workers derive from the model, done once
    assert got["converted"] == (got["choice"]["name"] == "gigatoken")


def test_sentencepiece_needs_no_check(tiny_model):
    choice = self_check.choose_backend("sentencepiece", tiny_model, [])
    assert (choice.name, choice.version, choice.parity) == ("sentencepiece", spm.__version__, {})


def test_auto_falls_back_when_the_model_is_unsupported(nfkc_model, tmp_path):
    choice = self_check.choose_backend("auto", nfkc_model, _corpus(tmp_path))
    assert choice.name == "sentencepiece"
    assert choice.parity["result"] == "fallback" and "nmt_nfkc" in choice.parity["reason"]
    assert {c["result"] for c in choice.parity["checks"]} == {"unavailable"}


def test_auto_falls_back_when_no_fast_backend_is_installed(no_fast_backends, tiny_model, tmp_path):
    choice = self_check.choose_backend("auto", tiny_model, _corpus(tmp_path))
    assert choice.name == "sentencepiece" and choice.parity["result"] == "fallback"
    for check in choice.parity["checks"]:
        assert check["result"] == "unavailable" and "not installed" in check["reason"]


def test_a_named_backend_that_is_missing_is_an_error(no_fast_backends, tiny_model, tmp_path):
    for backend in engines.FAST_BACKENDS:
        with pytest.raises(ValueError, match=f"--tokenizer_backend {backend}: .*not installed"):
            self_check.choose_backend(backend, tiny_model, _corpus(tmp_path))


class _WrongOnDigits:
    """An engine that gets one kind of text wrong: what a buggy fast backend looks like."""

    def __init__(self, tokenizer, threads=None):
        self._sp = engines.SentencePieceEngine(tokenizer)

    def encode(self, texts):
        ids, offsets = self._sp.encode(texts)
        ids = ids.copy()
        for i, text in enumerate(texts):
            if "123" in text and offsets[i + 1] > offsets[i]:
                ids[offsets[i]] += 1
        return ids, offsets


def test_auto_falls_back_on_a_mismatch(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setitem(engines._ENGINES, "kitoken", _WrongOnDigits)
    _only_auto(monkeypatch, "kitoken")
    monkeypatch.setattr(self_check, "package_version", lambda name: "test")
    choice = self_check.choose_backend("auto", tiny_model, _corpus(tmp_path))
    assert choice.name == "sentencepiece" and choice.parity["result"] == "fallback"
    (check,) = choice.parity["checks"]
    assert check["result"] == "mismatch" and check["mismatches"] > 0 and "1234567890" in check["reason"]
    with pytest.raises(ValueError, match="different from SentencePiece"):
        self_check.choose_backend("kitoken", tiny_model, _corpus(tmp_path))


def test_sample_documents_spreads_over_files_within_budget(tmp_path):
    files = []
    for f in range(20):
        lines = [pile_line(f"file {f} doc {i} " + "w" * 500) for i in range(50)] + [b"not json"]
        files.append(write_lines(str(tmp_path / f"{f:02d}.jsonl.zst"), lines))
    texts, n = self_check.sample_documents(files, total_bytes=40_000, max_files=8)
    assert n == 8
    assert len({t.split(" doc ")[0] for t in texts}) == 8
    # The budget counts JSON lines, not text; the document that reaches a file's share is cut there.
    assert 35_000 < sum(len(t) for t in texts) <= 40_000
    assert [t for t in texts if not t.endswith("w" * 500)] and all(t.startswith("file ") for t in texts)
    assert self_check.sample_documents([], 1000) == ([], 0)


def test_sample_documents_reads_a_bounded_prefix_of_each_file(tmp_path, monkeypatch):
    """A file of documents too long for the sample is not read to its end."""
    lines = [pile_line("z" * 1_500_000) for _ in range(30)] + [pile_line("short and late")]
    path = write_lines(str(tmp_path / "big.jsonl.zst"), lines)
    scanned = []
    real = self_check.inputs.iter_lines

    def counting(p, limit):
        for line in real(p, limit):
            scanned.append(line.number)
            yield line

    monkeypatch.setattr(self_check.inputs, "iter_lines", counting)
    texts, _ = self_check.sample_documents([path], total_bytes=100_000)
    assert texts == [] and max(scanned) < 5


# --- Workers: the Encoder, and the verification mode.


def test_encoder_pickles_as_its_settings(tiny_model):
    encoder = Encoder(tiny_model, "sentencepiece", verify=True)
    encoder.encode(["warm"])
    clone = pickle.loads(pickle.dumps(encoder))
    assert clone._engine is None and clone.backend == "sentencepiece"
    assert len(pickle.dumps(encoder)) < 1000
    assert clone.encode(["hello"]) == _sp_ids(tiny_model, ["hello"])


def test_verification_reports_each_mismatch(tiny_model, monkeypatch):
    monkeypatch.setitem(engines._ENGINES, "kitoken", _WrongOnDigits)
    monkeypatch.setattr(sp_model, "model_problems", lambda backend, facts: [])
    encoder = Encoder(tiny_model, "kitoken", verify=True)
    ids, offsets, mismatches = encoder.encode_verified(["abc", "x 123", "def", "123"])
    assert [i for i, _ in mismatches] == [1, 3]
    assert "from token 0" in mismatches[0][1]
    unverified = Encoder(tiny_model, "kitoken")
    assert unverified.encode_verified(["x 123"])[2] == []


def test_a_worker_without_the_chosen_backend_fails_loudly(no_fast_backends, tiny_model):
    with pytest.raises(RuntimeError, match="chosen by the driver"):
        Encoder(tiny_model, "gigatoken").load()


def test_build_stream_flat_matches_build_stream():
    rng = np.random.default_rng(0)
    for _ in range(300):
        docs = [rng.integers(3, 100, rng.integers(0, 6)).astype(np.int32) for _ in range(rng.integers(0, 8))]
        ids = np.concatenate(docs) if docs else np.zeros(0, np.int32)
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
        chosen = rng.random(len(docs)) < 0.7
        for bos, eos in ((None, 2), (1, None), (1, 2)):
            sep = 2 if eos else 1
            want = packing.build_stream(
                [np.array(([bos] if bos else []) + d.tolist() + ([eos] if eos else []), np.int32)
                 for d, c in zip(docs, chosen, strict=True) if c], sep)
            got = packing.build_stream_flat(ids, offsets, chosen, bos_id=bos, eos_id=eos, separator_id=sep)
            assert got.context == want.context and got.labels.dtype == np.int32
            np.testing.assert_array_equal(got.labels, want.labels)
            np.testing.assert_array_equal(got.starts, want.starts)
