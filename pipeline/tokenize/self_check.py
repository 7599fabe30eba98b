"""Choosing a tokenizer backend in the driver, before any worker starts, for every kind: `choose_backend`.

  1. static checks of the tokenizer against what each engine is known to get wrong (its kind's
     `engine_problems`: for a SentencePiece model, its settings);
  2. the engine is loaded from the tokenizer (a missing package or a refused model is a reason);
  3. a self-check: the engine and the kind's reference (the owning library's own encode) encode a
     sample of the actual input (the first documents of a few input files) plus adversarial strings
     built for this tokenizer (its own special tokens and pieces as literal text, byte-fallback
     characters, NULs, lone combining marks, long lines without spaces, digit runs, mixed scripts,
     odd whitespace); every id must be equal.
`auto` takes the first fast engine of the kind's `auto` order that passes all three and otherwise
the reference, logging why; naming a fast engine makes any failure an error. The result (backend,
version, what was checked) goes to the manifest's `tokenizer.backend`. While the ids are compared,
which cuts of long documents keep the engine's ids is derived once for the workers (pieces.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from pipeline.core import documents
from pipeline.io import columnar, inputs
from pipeline.tokenize.engines import (
    BackendUnavailable,
    backend_version,
    load_engine,
    mismatched,
    package_version,
)
from pipeline.tokenize.kinds.base import Tokenizer
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.kinds.registry import AUTO, KINDS
from pipeline.tokenize.model import BackendChoice
from pipeline.tokenize.pieces import check_cuts

LOG = logging.getLogger(__name__)

SAMPLE_BYTES = 2 << 20  # input text the self-check encodes with both engines
SAMPLE_FILES = 8  # spread over at most this many input files (evenly spaced in the sorted list)


def adversarial_texts(own: Sequence[str] = (), long_line: int = 1 << 16) -> list[str]:
    """Strings where engines are known to part ways with their reference, with `own` strings inside text.

    `own`: the tokenizer's strings that must stay text (its kind's `check_strings`: special tokens,
    control and user-defined pieces). `long_line` sets the length of the lines without any space (1 MB
    in the tests).
    """
    specials = ["<s>", "</s>", "<unk>", "<pad>", "<mask>", "[CLS]", "<|endoftext|>", "<0x41>", "<0x00>", *own]
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
    return list(dict.fromkeys(texts))


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


def check_texts(tokenizer: Tokenizer, long_line: int = 1 << 16) -> list[str]:
    """The adversarial strings of the self-check for this tokenizer (its kind's own strings inside text)."""
    return adversarial_texts(tokenizer.check_strings(), long_line)


def reference_ids(tokenizer: Tokenizer, texts: list[str], adversarial: list[str]) -> dict:
    """The reference's encodings of the sampled "documents" and of the "adversarial" strings."""
    reference = load_engine(KINDS[tokenizer.kind].reference, tokenizer)
    return {"documents": reference.encode(texts), "adversarial": reference.encode(adversarial)}


def self_check(backend: str, tokenizer: Tokenizer, expected: Future | None, texts: list[str], adversarial: list[str],
               pool: ThreadPoolExecutor) -> dict:
    """Load `backend` over `tokenizer` and compare its ids with the reference's: a dict for the manifest.

    `expected`: `reference_ids`, being computed while the engine loads. `pool`: a thread for what
    workers derive from the engine, done while the ids are compared.
    `result` is "passed", "mismatch" or "unavailable" (with a `reason`).
    """
    out: dict = {"backend": backend, "version": backend_version(backend, tokenizer)}
    start = time.monotonic()
    try:
        engine = load_engine(backend, tokenizer)
    except BackendUnavailable as e:
        return {**out, "result": "unavailable", "reason": str(e)}
    # Which cuts of long documents keep this engine's ids: every worker needs it, once per process
    # (pipeline/tokenize/pieces.py); a failure there is for the workers to report.
    derived = pool.submit(check_cuts, engine, tokenizer)
    got = engine.encode(texts), engine.encode(adversarial)  # while the reference may still be encoding
    expected = expected.result()
    bad_docs = mismatched(expected["documents"], got[0])
    bad_adv = mismatched(expected["adversarial"], got[1])
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
            f"{len(adversarial)} adversarial strings get ids different from "
            f"{KINDS[tokenizer.kind].reference_name}'s, e.g. " + ", ".join(shown),
        })
    else:
        out["result"] = "passed"
    return out


def choose_backend(requested: str, tokenizer: Tokenizer | str, input_files: list[str], *,
                   sample_bytes: int = SAMPLE_BYTES, schema: documents.Schema = documents.PILE) -> BackendChoice:
    """Resolve `--tokenizer_backend` for a tokenizer of any kind (or the one at this path), in the driver.

    `requested`: the kind's reference, one of its fast engines, or "auto". `auto` tries the kind's
    fast engines in order and uses the first that loads and passes the self-check on this tokenizer
    and a sample of `input_files`; otherwise the reference, with the reasons logged and recorded. A
    named fast engine that fails raises ValueError (nothing silently changes).
    The manifest's `parity`: requested, result ("passed" or "fallback"), documents and text bytes
    sampled, adversarial strings, mismatches and reason of the chosen check, and every check made.
    """
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
    row = KINDS[tok.kind]
    if requested not in row.backends:
        raise ValueError(f"--tokenizer_backend must be one of {row.backends} for a {tok.kind} tokenizer, "
                         f"got {requested!r}")
    version = backend_version(row.reference, tok)
    if requested == row.reference:
        return BackendChoice(row.reference, version, {})
    start = time.monotonic()
    texts, files = sample_documents(input_files, sample_bytes, schema=schema)
    adversarial = check_texts(tok)
    sample = {"files_sampled": files, "documents": len(texts),
              "text_bytes": sum(len(t.encode("utf-8")) for t in texts), "adversarial_strings": len(adversarial)}
    expected = None
    checks = []
    with ThreadPoolExecutor(2) as pool:
        for backend in row.auto if requested == AUTO else (requested,):
            if expected is None and not tok.engine_problems(backend) and package_version(backend):
                # The reference's ids, computed once, only when some engine can be checked, and while the
                # engine loads (the reference libraries release the GIL; converting a model holds it).
                expected = pool.submit(reference_ids, tok, texts, adversarial)
            check = self_check(backend, tok, expected, texts, adversarial, pool)
            checks.append(check)
            if check["result"] == "passed":
                LOG.info("tokenizer backend %s %s: ids identical to %s's on %d sampled documents (%.1f MB) and "
                         "%d adversarial strings (%.1f s)", backend, check["version"], row.reference_name,
                         len(texts), sample["text_bytes"] / 1e6, len(adversarial), time.monotonic() - start)
                return BackendChoice(backend, check["version"], {"requested": requested, "result": "passed",
                                                                 **sample, "mismatches": 0, "checks": checks})
            if requested != AUTO:
                raise ValueError(f"--tokenizer_backend {backend}: {check['reason']}. Use --tokenizer_backend "
                                 f"{row.reference} (or auto, which falls back to it).")
            LOG.warning("tokenizer backend %s not used (%s): %s", backend, check["result"], check["reason"])
    reason = "; ".join(f"{c['backend']}: {c['reason']}" for c in checks)
    LOG.warning("tokenizer backend: falling back to %s %s", row.reference_name, version)
    return BackendChoice(row.reference, version, {"requested": requested, "result": "fallback", "reason": reason,
                                                  **sample, "checks": checks})
