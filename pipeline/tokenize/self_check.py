"""Choosing a tokenizer backend in the driver, before any worker starts: `choose_backend`.

  1. static checks of the model against what each engine is known to get wrong (`model_problems`);
  2. the engine is loaded from the model (a missing package or a refused model is a reason);
  3. a self-check: both engines encode a sample of the actual input (the first documents of a few
     input files) plus adversarial strings built for this model (its own control pieces as literal
     text, byte-fallback characters, NULs, lone combining marks, long lines without spaces, digit
     runs, mixed scripts, odd whitespace); every id must be equal.
`auto` takes the first fast engine that passes all three and otherwise SentencePiece, logging why;
naming a fast engine makes any failure an error. The result (backend, version, what was checked)
goes to the manifest's `tokenizer.backend`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

import sentencepiece as spm

from pipeline.core import documents
from pipeline.io import columnar, inputs
from pipeline.tokenize.engines import (
    AUTO,
    BACKENDS,
    FAST_BACKENDS,
    SENTENCEPIECE,
    BackendUnavailable,
    SentencePieceEngine,
    load_engine,
    mismatched,
    model_facts,
    package_version,
)
from pipeline.tokenize.model import TokenizerModel, as_model
from pipeline.tokenize.model_facts import ModelFacts, model_problems
from pipeline.tokenize.pieces import check_model

LOG = logging.getLogger(__name__)

SAMPLE_BYTES = 2 << 20  # input text the self-check encodes with both engines (~1-2 s of SentencePiece)
SAMPLE_FILES = 8  # spread over at most this many input files (evenly spaced in the sorted list)


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """What the driver decided, recorded in the manifest's `tokenizer.backend`."""

    name: str  # the backend the workers use
    version: str  # its package version
    parity: dict  # how the choice was checked: result, documents, mismatches, reasons ({} for SentencePiece)

    def to_json(self) -> dict:
        """Manifest form."""
        return {"name": self.name, "version": self.version, "parity": self.parity}


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
                     max_files: int = SAMPLE_FILES, schema: documents.Schema = documents.PILE) -> tuple[list[str], int]:
    """The first documents of up to `max_files` input files (evenly spaced), about `total_bytes` of text.

    Returns (texts, number of files read). Each file gives an equal share of the total, counted in
    line bytes; the document that reaches a file's share is cut there (any prefix of a text is a
    text to compare on), so the sample, and the check's time, is the same whatever the number of
    files. Lines that are not valid documents are skipped here (the pipeline dead-letters them), and
    so are documents over max(share, 1 MB); no more than 16 shares of each file are read, so a file
    of huge documents cannot stall the driver.
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
            lines = (columnar.iter_lines(path, schema) if columnar.is_columnar(path) else
                     inputs.iter_lines(path, longest))
            for line in lines:
                if taken >= share or line.offset >= 16 * share:
                    break
                try:
                    text, _ = documents.parse_line(line, longest, schema)
                except documents.BadRecord:
                    continue
                room = share - taken
                texts.append(text if len(line.data) <= room else text[:room])
                taken += len(line.data)
        except inputs.CorruptInputError as e:
            LOG.warning("tokenizer self-check: %s (the job's read will report it)", e)
    return texts, len(chosen)


def reference_ids(proto: bytes, texts: list[str], adversarial: list[str]) -> dict:
    """SentencePiece's encodings of the sampled "documents" and of the "adversarial" strings."""
    reference = SentencePieceEngine(proto)
    return {"documents": reference.encode(texts), "adversarial": reference.encode(adversarial)}


def self_check(backend: str, proto: bytes, facts: ModelFacts, expected: Future, texts: list[str],
               adversarial: list[str], pool: ThreadPoolExecutor | None = None) -> dict:
    """Load `backend` and compare its ids with SentencePiece's: a dict for the manifest.

    `expected`: `reference_ids`, being computed while the engine loads. `pool`: a thread for what
    workers derive from the engine, done while the ids are compared.
    `result` is "passed", "mismatch" or "unavailable" (with a `reason`).
    """
    out: dict = {"backend": backend, "version": package_version(backend)}
    start = time.monotonic()
    try:
        engine = load_engine(backend, proto, facts)
    except BackendUnavailable as e:
        return {**out, "result": "unavailable", "reason": str(e)}
    # Which cuts of long documents keep this engine's ids: every worker needs it, once per process
    # (pipeline/tokenize/pieces.py); a failure there is for the workers to report.
    derived = pool.submit(check_model, engine, proto) if pool is not None else None
    got = engine.encode(texts), engine.encode(adversarial)  # while SentencePiece may still be encoding
    expected = expected.result()
    bad_docs = mismatched(expected["documents"], got[0])
    bad_adv = mismatched(expected["adversarial"], got[1])
    if derived is not None:
        derived.exception()
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


def choose_backend(requested: str, model: TokenizerModel | str, input_files: list[str], *,
                   sample_bytes: int = SAMPLE_BYTES, schema: documents.Schema = documents.PILE) -> BackendChoice:
    """Resolve `--tokenizer_backend` in the driver, before any worker starts.

    `auto` tries the fast engines in order and uses the first that loads and passes the self-check
    on this model (read once by the driver, or from this path) and a sample of `input_files`;
    otherwise SentencePiece, with the reasons logged and recorded. A named fast engine that fails
    raises ValueError (nothing silently changes).
    The manifest's `parity`: requested, result ("passed" or "fallback"), documents and text bytes
    sampled, adversarial strings, mismatches and reason of the chosen check, and every check made.
    """
    if requested not in BACKENDS:
        raise ValueError(f"--tokenizer_backend must be one of {BACKENDS}, got {requested!r}")
    sp_version = package_version(SENTENCEPIECE) or spm.__version__
    if requested == SENTENCEPIECE:
        return BackendChoice(SENTENCEPIECE, sp_version, {})
    start = time.monotonic()
    proto = as_model(model).data
    facts = model_facts(proto)
    texts, files = sample_documents(input_files, sample_bytes, schema=schema)
    adversarial = adversarial_texts(facts)
    sample = {"files_sampled": files, "documents": len(texts),
              "text_bytes": sum(len(t.encode("utf-8")) for t in texts), "adversarial_strings": len(adversarial)}
    expected = None
    checks = []
    with ThreadPoolExecutor(2) as pool:
        for backend in FAST_BACKENDS if requested == AUTO else (requested,):
            if expected is None and not model_problems(backend, facts) and package_version(backend):
                # SentencePiece's ids, computed once, only when some engine can be checked, and while the
                # engine loads (SentencePiece releases the GIL; converting the model holds it).
                expected = pool.submit(reference_ids, proto, texts, adversarial)
            check = self_check(backend, proto, facts, expected, texts, adversarial, pool)
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


