"""Tokenizer backends: SentencePiece (the reference) and faster engines that must give identical ids.

The SentencePiece `.model` file stays the single source of truth: every backend is built from its
bytes, in each worker, and a fast backend is used only when it gives SentencePiece's ids.

  backend        engine                               built from the .model by
  sentencepiece  sentencepiece (reference)            SentencePieceProcessor
  gigatoken      gigatoken (MIT, beta), ~13x          gigatoken's own .model converter, with the
                                                      control pieces (<s>, </s>) removed from its
                                                      added tokens so that a literal "<s>" in a
                                                      document is text, as in SentencePiece
  kitoken        kitoken (BSD-2), ~5-7x               Kitoken.from_sentencepiece; encode_specials=False

`choose_backend` runs in the driver, before any worker starts:
  1. static checks of the model against what each engine is known to get wrong (`model_problems`);
  2. the engine is loaded from the model (a missing package or a refused model is a reason);
  3. a self-check: both engines encode a sample of the actual input (the first documents of a few
     input files) plus adversarial strings built for this model (its own control pieces as literal
     text, byte-fallback characters, NULs, lone combining marks, long lines without spaces, digit
     runs, mixed scripts, odd whitespace); every id must be equal.
`auto` takes the first fast engine that passes all three and otherwise SentencePiece, logging why;
naming a fast engine makes any failure an error. The result (backend, version, what was checked)
goes to the manifest's `tokenizer.backend`.

`Encoder` is what workers use. With `verify` it also runs SentencePiece on every document and
returns the documents whose ids differ (the pipeline dead-letters them or fails: `--verify_tokenizer`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import itertools
import json
import logging
import time
from collections.abc import Iterator

import fsspec
import numpy as np
import sentencepiece as spm

from pipeline import read

LOG = logging.getLogger(__name__)

SENTENCEPIECE = "sentencepiece"
FAST_BACKENDS = ("gigatoken", "kitoken")  # the order `auto` tries them in: fastest first
AUTO = "auto"
BACKENDS = (SENTENCEPIECE, *FAST_BACKENDS, AUTO)
_PACKAGES = {SENTENCEPIECE: "sentencepiece", "gigatoken": "gigatoken", "kitoken": "kitoken"}

SAMPLE_BYTES = 2 << 20  # input text the self-check encodes with both engines (~1-2 s of SentencePiece)
SAMPLE_FILES = 8  # spread over at most this many input files (evenly spaced in the sorted list)
GIGATOKEN_RELOAD_BYTES = 256 << 20  # rebuild gigatoken's encoder after this much text (bounds its cache)


class BackendUnavailable(RuntimeError):
    """A fast backend cannot be used with this model or in this environment; the message says why."""


class TokenizerMismatch(RuntimeError):
    """A fast backend gave ids that differ from SentencePiece's (raised under `--verify_tokenizer fail`)."""


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """What the driver decided, recorded in the manifest's `tokenizer.backend`."""

    name: str  # the backend the workers use
    version: str  # its package version
    parity: dict  # how the choice was checked: result, documents, mismatches, reasons ({} for SentencePiece)

    def to_json(self) -> dict:
        """Manifest form."""
        return dataclasses.asdict(self)


def package_version(backend: str) -> str | None:
    """Installed version of a backend's package, or None when it is not installed."""
    try:
        return importlib.metadata.version(_PACKAGES[backend])
    except importlib.metadata.PackageNotFoundError:
        return None


# --- What the .model says (a minimal protobuf reader: sentencepiece_model_pb2 needs a matching protobuf).

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            length, i = _varint(buf, i)
            if i + length > len(buf):
                raise ValueError(f"not a SentencePiece model (field {field} runs past the end)")
            value, i = buf[i : i + length], i + length
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"not a SentencePiece model (protobuf wire type {wire})")
        yield field, value


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """The settings of a SentencePiece model that decide whether an engine reproduces it."""

    model_type: str
    byte_fallback: bool
    split_by_whitespace: bool
    treat_whitespace_as_suffix: bool
    normalizer: str  # "identity", "nmt_nfkc", ... ("" when a custom rule set was compiled in)
    has_charsmap: bool  # a precompiled normalization map (any normalizer but identity)
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool
    escape_whitespaces: bool
    control_pieces: tuple[str, ...]  # e.g. <s>, </s>: never produced from text by SentencePiece
    user_defined_pieces: tuple[str, ...]
    piece_types: tuple[int, ...]  # per id

    @classmethod
    def from_proto(cls, proto: bytes) -> ModelFacts:
        """Read the facts from a serialized ModelProto."""
        pieces: list[tuple[bytes, int]] = []
        trainer: dict = {}
        norm: dict = {}
        try:
            for field, value in _fields(proto):
                if field == 1:
                    pieces.append(_piece(value))
                elif field == 2:
                    trainer = dict(_fields(value))
                elif field == 3:
                    norm = dict(_fields(value))
            spm.SentencePieceProcessor().LoadFromSerializedProto(proto)  # SentencePiece must accept it too
        except (IndexError, UnicodeDecodeError, AttributeError, RuntimeError, OSError) as e:
            raise ValueError(f"not a SentencePiece model ({e})") from None
        if not pieces:
            raise ValueError("not a SentencePiece model (no pieces)")
        return cls(
            model_type=_MODEL_TYPES.get(trainer.get(3, 1), str(trainer.get(3))),
            byte_fallback=bool(trainer.get(35, 0)),
            split_by_whitespace=bool(trainer.get(22, 1)),
            treat_whitespace_as_suffix=bool(trainer.get(24, 0)),
            normalizer=norm.get(1, b"").decode("utf-8", "replace"),
            has_charsmap=bool(norm.get(2, b"")),
            add_dummy_prefix=bool(norm.get(3, 1)),
            remove_extra_whitespaces=bool(norm.get(4, 1)),
            escape_whitespaces=bool(norm.get(5, 1)),
            control_pieces=tuple(p.decode("utf-8") for p, t in pieces if t == _CONTROL),
            user_defined_pieces=tuple(p.decode("utf-8") for p, t in pieces if t == _USER_DEFINED),
            piece_types=tuple(t for _, t in pieces),
        )


def _piece(msg: bytes) -> tuple[bytes, int]:
    """(piece, type) of a SentencePiece message (1: piece, 2: score, 3: type), without a generator."""
    i, n, piece, kind = 0, len(msg), b"", _NORMAL
    while i < n:
        key, i = _varint(msg, i)
        wire = key & 7
        if wire == 2:
            length, i = _varint(msg, i)
            if key >> 3 == 1:
                piece = msg[i : i + length]
            i += length
        elif wire == 0:
            value, i = _varint(msg, i)
            if key >> 3 == 3:
                kind = value
        else:
            i += 4 if wire == 5 else 8
    if i != n:
        raise ValueError("not a SentencePiece model (a piece runs past its end)")
    return piece, kind


def model_problems(backend: str, facts: ModelFacts) -> list[str]:
    """Model settings a fast engine is known to get wrong (measured: tests/test_backends.py)."""
    problems = []
    if facts.model_type != "bpe" or not facts.byte_fallback:
        problems.append(f"{backend} reproduces only BPE models with byte fallback "
                        f"(this one: {facts.model_type}, byte_fallback={facts.byte_fallback})")
    if facts.treat_whitespace_as_suffix or not facts.escape_whitespaces:
        problems.append(f"{backend} does not support treat_whitespace_as_suffix or escape_whitespaces=false")
    if facts.has_charsmap:
        problems.append(f"normalization {facts.normalizer or 'custom'!r}: {backend} does not reproduce "
                        "SentencePiece's precompiled normalization exactly (combining sequences, Hangul "
                        "jamo, tabs, NULs); only identity-normalized models (Llama-2 style) are supported")
    if backend == "gigatoken":
        if facts.user_defined_pieces:
            problems.append(f"the model has {len(facts.user_defined_pieces)} user-defined symbols, which "
                            "gigatoken matches before normalization (SentencePiece matches them after)")
        if facts.remove_extra_whitespaces:
            problems.append("remove_extra_whitespaces=true: gigatoken strips all Unicode whitespace where "
                            "SentencePiece strips only spaces")
    elif backend == "kitoken":
        if not facts.split_by_whitespace:
            problems.append("the model was trained with split_by_whitespace=false, which kitoken ignores")
        if facts.remove_extra_whitespaces:
            problems.append("remove_extra_whitespaces=true: kitoken encodes whitespace-only text differently")
    return problems


# --- Engines: encode(texts) -> (ids, offsets): one flat int32 array of every text's ids (no BOS/EOS) and
# int64 offsets, text i being ids[offsets[i]:offsets[i + 1]]. Flat arrays spare a Python int per token.


def read_model(model_path: str) -> bytes:
    """The .model bytes (local path or fsspec URL)."""
    with fsspec.open(model_path, "rb") as f:
        return f.read()


def flatten(lists: list) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) of a list of id lists."""
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(lists), np.int32, int(offsets[-1]))
    return ids, offsets


class _SentencePieceEngine:
    def __init__(self, proto: bytes, facts: ModelFacts | None = None, threads: int | None = None):
        self._sp = spm.SentencePieceProcessor()
        self._sp.LoadFromSerializedProto(proto)
        # SentencePiece spreads a batch over all cores by default; with one worker process per core
        # that oversubscribes the machine (~10% slower measured here), so workers pass threads=1.
        self._threads = -1 if threads is None else threads

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return flatten(self._sp.encode(texts, num_threads=self._threads) if texts else [])


class _KitokenEngine:
    def __init__(self, proto: bytes, facts: ModelFacts, threads: int | None = None):
        try:
            import kitoken
        except ImportError as e:
            raise BackendUnavailable(f"kitoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        try:
            self._kt = kitoken.Kitoken.from_sentencepiece(proto)
        except Exception as e:  # kitoken raises its own error types
            raise BackendUnavailable(f"kitoken cannot load the model: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # encode_specials=False: a literal "<s>" in a document is text, as in SentencePiece.
        return flatten([self._kt.encode(text, False) for text in texts])


def gigatoken_json(proto: bytes, facts: ModelFacts) -> str:
    """The tokenizer.json gigatoken needs for a .model, with special-token matching off.

    gigatoken's converter lists control pieces (<s>, </s>) as added special tokens, which it
    matches in the text: a literal "<s>" in a document would become id 1. SentencePiece never
    produces a control, unknown, unused or byte piece from a merge, so those are removed from
    the added tokens and from the merges.
    """
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    spec = json.loads(sentencepiece_to_tokenizer_json(proto))
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in facts.control_pieces]
    model = spec["model"]
    special = {piece for piece, i in model["vocab"].items() if facts.piece_types[i] not in (_NORMAL, _USER_DEFINED)}
    model["merges"] = [m for m in model["merges"] if m[0] + m[1] not in special]
    return json.dumps(spec, ensure_ascii=False)


class _GigatokenEngine:
    def __init__(self, proto: bytes, facts: ModelFacts, threads: int | None = None):
        try:
            import awkward
            import gigatoken
        except ImportError as e:
            raise BackendUnavailable(f"gigatoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        self._ak = awkward
        self._tokenizer_cls = gigatoken.Tokenizer
        self._parallel = threads is None or threads > 1
        try:
            self._json = gigatoken_json(proto, facts)
            self._load()
        except Exception as e:  # the converter raises ValueError; the Rust loader its own errors
            raise BackendUnavailable(f"gigatoken cannot load the model: {e}") from None

    def _load(self) -> None:
        self._tok = self._tokenizer_cls.from_json(self._json)
        self._since_load = 0

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not texts:
            return flatten([])
        # gigatoken keeps a pretoken cache that grows with the distinct words it has seen; a fresh
        # encoder (~0.1 s) every few hundred MB keeps a worker's memory flat on any corpus.
        if self._since_load > GIGATOKEN_RELOAD_BYTES:
            self._load()
        self._since_load += sum(len(t) for t in texts)
        # parallel only when this process has cores to itself (threads > 1). encode_batch returns
        # an awkward array (flat ids + counts), half the cost of building Python lists.
        ak = self._ak
        out = self._tok.encode_batch(texts, parallel=self._parallel)
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(ak.to_numpy(ak.num(out)), out=offsets[1:])
        return ak.to_numpy(ak.flatten(out)).astype(np.int32), offsets


_ENGINES = {SENTENCEPIECE: _SentencePieceEngine, "gigatoken": _GigatokenEngine, "kitoken": _KitokenEngine}


def load_engine(backend: str, proto: bytes, facts: ModelFacts | None = None, threads: int | None = None):
    """An engine for `backend` from the model bytes; raises BackendUnavailable with the reason.

    `threads`: how many threads one batch may use (None: the engine's default, all cores).
    """
    if backend not in _ENGINES:
        raise ValueError(f"unknown tokenizer backend {backend!r}; choose one of {BACKENDS}")
    if backend == SENTENCEPIECE:
        return _SentencePieceEngine(proto, threads=threads)
    facts = facts or ModelFacts.from_proto(proto)
    problems = model_problems(backend, facts)
    if problems:
        raise BackendUnavailable("; ".join(problems))
    return _ENGINES[backend](proto, facts, threads)


# --- The self-check.


def adversarial_texts(facts: ModelFacts | None = None, long_line: int = 1 << 16) -> list[str]:
    """Strings where engines are known to part ways with SentencePiece, plus the model's own pieces.

    `long_line` sets the length of the lines without any space (1 MB in the tests).
    """
    specials = ["<s>", "</s>", "<unk>", "<pad>", "<mask>", "[CLS]", "<|endoftext|>", "<0x41>", "<0x00>"]
    if facts is not None:
        specials += [p for p in facts.control_pieces + facts.user_defined_pieces if p]
    texts = []
    for s in dict.fromkeys(specials):
        texts += [s, f"a{s}b", f" {s} ", f"{s}{s}", f"text {s}\n{s}text", f"{s[:-1]}", f"x{s}1"]
    texts += [
        # whitespace: spaces, tabs, newlines, Unicode spaces and separators, at the edges and in runs
        " ", "  ", "a", " a", "a ", "  a  b  ", "a   b", "\t", "a\tb", "\ta\t", "a\nb", "\n\n\n", "a\r\nb",
        "\u00a0a\u00a0", "\u3000x\u3000", "a\u2028b\u2029c", "a\u0085b", "\u1680a", "a\u200bb", "\ufeffa",
        "\u2002\u2003\u2009x", "\x0b\x0cx", "▁", "▁▁a", "a▁ b", " ⁇ ", "\u2047",
        # NULs and control characters
        "\x00", "a\x00b", "\x00\x00 \x00", "\x01\x02\x1f\x7f", "a\x1bb", "\x80\x9f",
        # lone combining marks, combining sequences, normalization-sensitive text
        "\u0301", " \u0301", "\u0301a", "e\u0301\u0301", "\u0308\u0308\u0308", "Å Å", "ﬁ ﬂ ①", "ＡＢＣ１２３",
        "\u1100\u1161\u11a8", "ß ẞ İ ı", "ǅ", "\u2126\u212b",
        # byte fallback: rare CJK, astral planes, private use, replacement char, emoji sequences
        "𠀀𠀁𠀂", "\U0001d400\U0001d7ff", "\ue000\uf8ff", "\U0010fffd", "\ufffd", "👩‍👩‍👧‍👦", "🇺🇸🇯🇵", "👍🏽",
        "😀" * 50, "\U000e0041\U000e007f",
        # digit runs and numbers in other scripts
        "1234567890" * 20, "3.14159 2.71828 -0.0 1e-10", "١٢٣٤ ۱۲۳ ०१२ ๑๒๓", "0x7fffffff", "1,000,000",
        # mixed scripts
        "Hello мир 世界 العالم नमस्ते שלום Γειά", "日本語のテキストと English text", "한국어 문장과 中文句子",
        "Ελληνικά and ქართული and ትግርኛ", "mixed123АБВ456abc", "RTL \u202eevil\u202c text",
        # code and markup
        "def f(x):\n\tif x:\n\t\treturn x**2  # ok\n", '{"a": [1, 2, {"b": null}]}', "<html><s>x</s></html>",
    ]
    texts += [
        "a" * long_line,
        "ab1" * (long_line // 3),
        "数据" * (long_line // 6),
        "\u0301" * (long_line // 2),
        " " * long_line + "x",
        "x" + "\t" * (long_line // 4),
        "<s>" * (long_line // 3),
    ]
    return texts


def sample_documents(input_files: list[str], total_bytes: int = SAMPLE_BYTES,
                     max_files: int = SAMPLE_FILES) -> tuple[list[str], int]:
    """The first documents of up to `max_files` input files (evenly spaced), about `total_bytes` of text.

    Returns (texts, number of files read). Lines that are not valid documents are skipped here
    (the pipeline dead-letters them), and so are documents over max(share, 1 MB); no more than
    16 shares of each file are read, so a file of huge documents cannot stall the driver.
    """
    if not input_files:
        return [], 0
    step = max(1, len(input_files) / max_files)
    chosen = sorted({input_files[int(i * step)] for i in range(min(max_files, len(input_files)))})
    share = max(1, total_bytes // len(chosen))
    longest = max(share, 1 << 20)
    texts: list[str] = []
    for path in chosen:
        taken = 0
        try:
            for line in read.iter_lines(path, longest):
                if taken >= share or line.offset >= 16 * share:
                    break
                try:
                    text, _ = read.parse_line(line, longest)
                except read.BadRecord:
                    continue
                texts.append(text)
                taken += len(line.data)
        except read.CorruptInputError as e:
            LOG.warning("tokenizer self-check: %s (the job's read will report it)", e)
    return texts, len(chosen)


def mismatched(expected: tuple[np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Indices of the texts whose ids differ between two (ids, offsets) encodings of the same texts."""
    (a, a_off), (b, b_off) = expected, got
    if np.array_equal(a_off, b_off) and np.array_equal(a, b):
        return []
    return [i for i in range(len(a_off) - 1)
            if not np.array_equal(a[a_off[i] : a_off[i + 1]], b[b_off[i] : b_off[i + 1]])]


def first_difference(expected: np.ndarray, got: np.ndarray) -> int:
    """Position of the first differing id of two id arrays (the shorter length when one is a prefix)."""
    n = min(len(expected), len(got))
    diff = np.flatnonzero(expected[:n] != got[:n])
    return int(diff[0]) if len(diff) else n


def self_check(backend: str, proto: bytes, facts: ModelFacts, expected: dict, texts: list[str],
               adversarial: list[str]) -> dict:
    """Load `backend` and compare its ids with SentencePiece's; returns a dict for the manifest.

    `expected` holds SentencePiece's encodings of the "documents" and the "adversarial" strings.
    `result` is "passed", "mismatch" or "unavailable" (with a `reason`).
    """
    out: dict = {"backend": backend, "version": package_version(backend)}
    start = time.monotonic()
    try:
        engine = load_engine(backend, proto, facts)
    except BackendUnavailable as e:
        return {**out, "result": "unavailable", "reason": str(e)}
    bad_docs = mismatched(expected["documents"], engine.encode(texts))
    bad_adv = mismatched(expected["adversarial"], engine.encode(adversarial))
    out.update({
        "documents": len(texts),
        "adversarial_strings": len(adversarial),
        "mismatches": len(bad_docs) + len(bad_adv),
        "seconds": round(time.monotonic() - start, 2),
    })
    if bad_docs or bad_adv:
        shown = [ascii(texts[i][:40]) for i in bad_docs[:3]] + [ascii(adversarial[i][:40]) for i in bad_adv[:3]]
        out.update({
            "result": "mismatch",
            "reason": f"{len(bad_docs)} of {len(texts)} sampled documents and {len(bad_adv)} of "
            f"{len(adversarial)} adversarial strings get ids different from SentencePiece's, e.g. "
            + ", ".join(shown),
        })
    else:
        out["result"] = "passed"
    return out


def choose_backend(requested: str, model_path: str, input_files: list[str], *,
                   sample_bytes: int = SAMPLE_BYTES) -> BackendChoice:
    """Resolve `--tokenizer_backend` in the driver, before any worker starts.

    `auto` tries the fast engines in order and uses the first that loads and passes the self-check
    on this model and a sample of `input_files`; otherwise SentencePiece, with the reasons logged
    and recorded. A named fast engine that fails raises ValueError (nothing silently changes).
    The manifest's `parity`: requested, result ("passed" or "fallback"), documents and text bytes
    sampled, adversarial strings, mismatches and reason of the chosen check, and every check made.
    """
    if requested not in BACKENDS:
        raise ValueError(f"--tokenizer_backend must be one of {BACKENDS}, got {requested!r}")
    sp_version = package_version(SENTENCEPIECE) or spm.__version__
    if requested == SENTENCEPIECE:
        return BackendChoice(SENTENCEPIECE, sp_version, {})
    start = time.monotonic()
    proto = read_model(model_path)
    facts = ModelFacts.from_proto(proto)
    texts, files = sample_documents(input_files, sample_bytes)
    adversarial = adversarial_texts(facts)
    sample = {"files_sampled": files, "documents": len(texts),
              "text_bytes": sum(len(t.encode("utf-8")) for t in texts), "adversarial_strings": len(adversarial)}
    expected: dict = {}
    checks = []
    for backend in FAST_BACKENDS if requested == AUTO else (requested,):
        if not expected and not model_problems(backend, facts) and package_version(backend):
            # SentencePiece's ids, computed once and only when some engine can be checked.
            reference = _SentencePieceEngine(proto)
            expected = {"documents": reference.encode(texts), "adversarial": reference.encode(adversarial)}
        check = self_check(backend, proto, facts, expected, texts, adversarial)
        checks.append(check)
        if check["result"] == "passed":
            LOG.info("tokenizer backend %s %s: ids identical to SentencePiece's on %d sampled documents "
                     "(%.1f MB) and %d adversarial strings (%.1f s)", backend, check["version"],
                     len(texts), sample["text_bytes"] / 1e6, len(adversarial), time.monotonic() - start)
            return BackendChoice(backend, check["version"], {"requested": requested, "result": "passed",
                                                             **sample, "mismatches": 0, "checks": checks})
        if requested != AUTO:
            raise ValueError(
                f"--tokenizer_backend {backend}: {check['reason']}. Use --tokenizer_backend "
                "sentencepiece (or auto, which falls back to it)."
            )
        LOG.warning("tokenizer backend %s not used (%s): %s", backend, check["result"], check["reason"])
    reason = "; ".join(f"{c['backend']}: {c['reason']}" for c in checks)
    LOG.warning("tokenizer backend: falling back to SentencePiece %s", sp_version)
    return BackendChoice(SENTENCEPIECE, sp_version, {"requested": requested, "result": "fallback",
                                                     "reason": reason, **sample, "checks": checks})


class Encoder:
    """Batch encoder used inside workers; pickles as the model path, backend name and verify flag.

    `threads`: threads per batch (None: all cores; 1 when each core runs its own worker process).
    """

    def __init__(self, model_path: str, backend: str, verify: bool = False, threads: int | None = None):
        self._model_path = model_path
        self._backend = backend
        self._threads = threads
        self._verify = verify and backend != SENTENCEPIECE
        self._engine = None
        self._reference = None

    @property
    def backend(self) -> str:
        """The backend's name."""
        return self._backend

    def load(self) -> None:
        """Load the model (call once per worker, in DoFn.setup)."""
        proto = read_model(self._model_path)
        try:
            self._engine = load_engine(self._backend, proto, threads=self._threads)
        except BackendUnavailable as e:
            # The driver checked this backend; a worker without it must not quietly use another.
            raise RuntimeError(f"tokenizer backend {self._backend}, chosen by the driver, fails on this "
                               f"worker: {e}") from None
        if self._verify:
            self._reference = _SentencePieceEngine(proto, threads=self._threads)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every text's ids (without BOS/EOS) in one int32 array, and offsets.

        Returns (ids, offsets): text i's ids are ids[offsets[i]:offsets[i + 1]].
        """
        if self._engine is None:
            self.load()
        return self._engine.encode(texts)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without BOS/EOS."""
        ids, offsets = self.encode_flat(texts)
        return [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    def encode_verified(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """`encode_flat`, plus [(index, what differs)] for the texts whose ids differ from SentencePiece's.

        Without verification (or with SentencePiece itself) the list is always empty.
        """
        ids, offsets = self.encode_flat(texts)
        if not self._verify or not texts:
            return ids, offsets, []
        want, want_off = self._reference.encode(texts)
        mismatches = []
        for i in mismatched((want, want_off), (ids, offsets)):
            a, b = want[want_off[i] : want_off[i + 1]], ids[offsets[i] : offsets[i + 1]]
            mismatches.append((i, f"{self._backend} ids differ from SentencePiece's from token "
                                  f"{first_difference(a, b)} ({len(b)} vs {len(a)} tokens)"))
        return ids, offsets, mismatches

    def __getstate__(self):
        return {**self.__dict__, "_engine": None, "_reference": None}
