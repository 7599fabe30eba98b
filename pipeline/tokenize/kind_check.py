"""The driver's self-check for Hugging Face and tiktoken tokenizers: `choose_kind_backend`.

The contract of pipeline/tokenize/self_check.py, for these kinds: a fast engine is used only after
it gave the reference's ids (the owning library's own encode) on a sample of the actual input and on
adversarial strings built for this tokenizer (its special tokens as literal text among them);
`auto` falls back to the reference, logging why, and a named fast engine that fails is an error.
The result is a `self_check.BackendChoice` for the manifest's `tokenizer.backend`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from pipeline.core import documents
from pipeline.tokenize.bpe_pieces import check_tokenizer
from pipeline.tokenize.engines import FAST_BACKENDS, BackendUnavailable, mismatched, package_version
from pipeline.tokenize.kind_engines import AUTO, AUTO_ORDER, REFERENCE, backends, load_kind_engine
from pipeline.tokenize.kinds.base import Tokenizer
from pipeline.tokenize.self_check import SAMPLE_BYTES, BackendChoice, adversarial_texts, sample_documents

LOG = logging.getLogger(__name__)


def kind_adversarial_texts(tokenizer: Tokenizer, long_line: int = 1 << 16) -> list[str]:
    """self_check's adversarial strings plus this tokenizer's special tokens inside text."""
    texts = adversarial_texts(None, long_line)
    for s in tokenizer.special_tokens:
        texts += [s, f"a{s}b", f" {s} ", f"{s}{s}", f"text {s}\n{s}text", s[:-1], f"x{s}1"]
    return list(dict.fromkeys(texts))


def check_kind_backend(backend: str, tokenizer: Tokenizer, expected: Future, texts: list[str],
                       adversarial: list[str]) -> dict:
    """Load `backend` over `tokenizer`, compare its ids with the reference's: a dict for the manifest.

    `expected`: the reference's ids of the texts, being computed while the engine loads and encodes.
    """
    # gigatoken is a package of its own; the batch engines are the owning library's.
    version = (package_version(backend) if backend in FAST_BACKENDS else None) or next(iter(
        tokenizer.versions().values()))
    out: dict = {"backend": backend, "version": version}
    start = time.monotonic()
    try:
        engine = load_kind_engine(backend, tokenizer)
    except BackendUnavailable as e:
        return {**out, "result": "unavailable", "reason": str(e)}
    check_tokenizer(engine, tokenizer)  # which cuts of long documents keep this engine's ids, for the workers
    got = engine.encode(texts), engine.encode(adversarial)
    reference = expected.result()
    bad_docs = mismatched(reference["documents"], got[0])
    bad_adv = mismatched(reference["adversarial"], got[1])
    out.update({"documents": len(texts), "adversarial_strings": len(adversarial),
                "mismatches": len(bad_docs) + len(bad_adv), "seconds": round(time.monotonic() - start, 2)})
    if bad_docs or bad_adv:
        shown = [ascii(texts[i][:40]) for i in bad_docs[:3]] + [ascii(adversarial[i][:40]) for i in bad_adv[:3]]
        out.update({"result": "mismatch",
                    "reason": f"{len(bad_docs)} of {len(texts)} sampled documents and {len(bad_adv)} of "
                    f"{len(adversarial)} adversarial strings get ids different from {REFERENCE[tokenizer.kind]}'s, "
                    "e.g. " + ", ".join(shown)})
    else:
        out["result"] = "passed"
    return out


def choose_kind_backend(requested: str, tokenizer: Tokenizer, input_files: list[str], *,
                        sample_bytes: int = SAMPLE_BYTES, schema: documents.Schema = documents.PILE) -> BackendChoice:
    """Resolve `--tokenizer_backend` for a Hugging Face or tiktoken tokenizer, in the driver.

    `requested`: the kind's reference ("tokenizers", "tiktoken"), one of its fast engines, or "auto".
    The parity record has the shape of self_check.choose_backend's.
    """
    names = backends(tokenizer.kind)
    if requested not in names:
        raise ValueError(f"--tokenizer_backend must be one of {names} for a {tokenizer.kind} tokenizer, "
                         f"got {requested!r}")
    reference = REFERENCE[tokenizer.kind]
    version = next(iter(tokenizer.versions().values()))
    if requested == reference:
        return BackendChoice(reference, version, {})
    start = time.monotonic()
    texts, files = sample_documents(input_files, sample_bytes, schema=schema)
    adversarial = kind_adversarial_texts(tokenizer)
    sample = {"files_sampled": files, "documents": len(texts),
              "text_bytes": sum(len(t.encode("utf-8")) for t in texts), "adversarial_strings": len(adversarial)}
    with ThreadPoolExecutor(1) as pool:  # the reference's ids (the libraries release the GIL) while an engine loads
        expected = pool.submit(lambda: {"documents": tokenizer.encode(texts),
                                        "adversarial": tokenizer.encode(adversarial)})
        return _first_passing(requested, tokenizer, expected, texts, adversarial, sample, start)


def _first_passing(requested: str, tokenizer: Tokenizer, expected: Future, texts: list[str], adversarial: list[str],
                   sample: dict, start: float) -> BackendChoice:
    """The first engine `requested` names that passes its check, else the reference (`auto`) or an error."""
    reference = REFERENCE[tokenizer.kind]
    version = next(iter(tokenizer.versions().values()))
    checks = []
    for backend in AUTO_ORDER[tokenizer.kind] if requested == AUTO else (requested,):
        check = check_kind_backend(backend, tokenizer, expected, texts, adversarial)
        checks.append(check)
        if check["result"] == "passed":
            LOG.info("tokenizer backend %s: ids identical to %s's on %d sampled documents (%.1f MB) and %d "
                     "adversarial strings (%.1f s)", backend, reference, len(texts), sample["text_bytes"] / 1e6,
                     len(adversarial), time.monotonic() - start)
            return BackendChoice(backend, check["version"], {"requested": requested, "result": "passed", **sample,
                                                             "mismatches": 0, "checks": checks})
        if requested != AUTO:
            raise ValueError(f"--tokenizer_backend {backend}: {check['reason']}. Use --tokenizer_backend {reference} "
                             "(or auto, which falls back to it).")
        LOG.warning("tokenizer backend %s not used (%s): %s", backend, check["result"], check["reason"])
    reason = "; ".join(f"{c['backend']}: {c['reason']}" for c in checks)
    LOG.warning("tokenizer backend: falling back to %s %s", reference, version)
    return BackendChoice(reference, version, {"requested": requested, "result": "fallback", "reason": reason,
                                              **sample, "checks": checks})
