"""datatrove's own decisions on documents: its quality filters and PII formatter, run for real.

Runs in .venv-datatrove (scripts/setup_datatrove_env.sh; datatrove is not a dependency of ours):

    .venv-datatrove/bin/python scripts/bench/datatrove_filters.py DOCS OUT.json [--time]

DOCS: JSON lines (plain or .zst) with a "text" each. OUT.json gets, per document and in order:
  filters: {name: [rule or null, the text datatrove left when it changed it (C4) or null]}, each filter
           run alone on the document's text;
  chain:   the four in the order gopher_quality, gopher_repetition, c4_quality, fineweb_quality, each
           on the text the one before left: [name of the first that removes, its rule] or null;
  pii:     PIIFormatter's text (emails and public IPs), its counters restarted for every document;
  and datatrove's punctuation sets and spaCy's version, for the tests to compare with ours.
--time: only the chain, as a datatrove pipeline runs it (each filter's run() a generator feeding the
next), timed on one core: the last line printed is `TIME {"docs": ..., "seconds": ..., "wall": ..., "kept": ...}`.
"""

from __future__ import annotations

import argparse
import io
import json
import time

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.formatters import PIIFormatter
from datatrove.utils.text import PUNCTUATION, TERMINAL_PUNCTUATION

FILTERS = {
    "gopher_quality": GopherQualityFilter,
    "gopher_repetition": GopherRepetitionFilter,
    "c4_quality": C4QualityFilter,
    "fineweb_quality": FineWebQualityFilter,
}


def read_texts(path: str) -> list[str]:
    """The "text" of every JSON line of a plain or zstd file."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return [json.loads(line)["text"] for line in data.decode().splitlines() if line.strip()]


def decide(step, text: str) -> tuple[str | None, str | None]:
    """(rule or None when kept, the new text when the filter changed it)."""
    doc = Document(text=text, id="0")
    result = step.filter(doc)
    if isinstance(result, tuple):
        return result[1], None
    if result:
        return None, (doc.text if doc.text != text else None)
    return "removed", None


def decide_all(texts: list[str]) -> tuple[dict, list]:
    """Each filter alone on each text, and the four in order (the chain), in one pass.

    The word filters run one after the other on the same text, so datatrove's own cache of its
    last five tokenizations (`split_into_parts`) serves them once; C4 runs last on the original.
    """
    steps = {name: cls() for name, cls in FILTERS.items()}
    filters: dict[str, list] = {name: [] for name in FILTERS}
    chained = []
    for text in texts:
        results = {name: decide(steps[name], text)
                   for name in ("gopher_quality", "gopher_repetition", "fineweb_quality", "c4_quality")}
        for name in FILTERS:
            filters[name].append(list(results[name]))
        verdict = None
        for name in FILTERS:
            rule, new = results[name]
            if name == "fineweb_quality" and results["c4_quality"][1] is not None:
                rule, new = decide(steps[name], results["c4_quality"][1])
            if rule is not None:
                verdict = [name, rule]
                break
        chained.append(verdict)
    return filters, chained


def pii(texts: list[str]) -> list[str]:
    """PIIFormatter on each text, its replacement counters at 0 for each (our per-document rule)."""
    out = []
    for text in texts:
        step = PIIFormatter()
        out.append(step.format(text))
    return out


def timed(texts: list[str]) -> dict:
    """The chain as a datatrove pipeline runs it (generators), on one core: CPU and wall seconds.

    Each filter first sees one document untimed, so that spaCy is loaded before the clock starts
    (as the other side loads it in its workers' setup).
    """
    filters = [cls() for cls in FILTERS.values()]
    for step in filters:
        sum(1 for _ in step.run(iter([Document(text=texts[0], id="warm")])))
    docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
    start, wall = time.process_time(), time.perf_counter()
    stream = docs
    for step in filters:
        stream = step.run(stream)
    kept = sum(1 for _ in stream)
    return {"docs": len(texts), "seconds": time.process_time() - start, "wall": time.perf_counter() - wall,
            "kept": kept}


def main() -> None:
    """Decide (or time) and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs")
    ap.add_argument("out")
    ap.add_argument("--time", action="store_true", help="only time the chain (see above)")
    args = ap.parse_args()
    texts = read_texts(args.docs)
    if args.time:
        result = timed(texts)
        with open(args.out, "w") as f:
            json.dump(result, f)
        print("TIME " + json.dumps(result))
        return
    filters, chained = decide_all(texts)
    import spacy

    result = {"filters": filters, "chain": chained, "pii": pii(texts),
              "punctuation": PUNCTUATION, "terminal": sorted(TERMINAL_PUNCTUATION), "spacy": spacy.__version__}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
