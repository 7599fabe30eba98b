"""datatrove's own FastTextClassifierFilter and URLFilter decisions, run for real.

Runs in .venv-datatrove (scripts/setup_datatrove_env.sh; datatrove is not a dependency of ours):

    .venv-datatrove/bin/python scripts/bench/datatrove_classifiers.py fasttext DOCS OUT.json --model M \
        [--keep hq:0.5,...|--remove cc:0.9,...] [--newline TEXT] [--time]
    .venv-datatrove/bin/python scripts/bench/datatrove_classifiers.py url DOCS OUT.json [--lists DIR] \
        [--integrated] [--soft_threshold 2] [--time]

DOCS: JSON lines with a "text" (fasttext) or a "url" (url) each. OUT.json gets, per document and in
order, fasttext: [kept, {label: score}] (the scores datatrove stores in the document's metadata);
url: [kept, reason or null]. --lists DIR: the files domains, urls, banned_words.txt,
banned_subwords.txt, soft_banned_words.txt found there are given to URLFilter as its extra lists,
with its integrated lists off unless --integrated (which extracts datatrove's shipped lists into
HF_HOME). tldextract never downloads here: TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS is set empty, so it uses
the Public Suffix List snapshot its package ships (as ours does).
--time: the filter's run() over all documents on one core, after one untimed document (the model or
lists loaded); prints `TIME {"docs": ..., "seconds": ..., "wall": ..., "kept": ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS"] = ""  # before tldextract reads it: the bundled snapshot only

from datatrove.data import Document  # noqa: E402
from datatrove.pipeline.filters import FastTextClassifierFilter, URLFilter  # noqa: E402

LISTS = {"extra_domains": "domains", "extra_urls": "urls", "banned_words": "banned_words.txt",
         "banned_subwords": "banned_subwords.txt", "soft_banned_words": "soft_banned_words.txt"}


def label_scores(text: str | None):
    """'hq:0.5,x:0.1' -> [("hq", 0.5), ("x", 0.1)] (datatrove's keep_labels / remove_labels)."""
    if not text:
        return None
    return [(label, float(score)) for label, score in (part.rsplit(":", 1) for part in text.split(","))]


def read_docs(path: str) -> list[dict]:
    """Every JSON line of a plain file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def fasttext_filter(args) -> FastTextClassifierFilter:
    """datatrove's filter on whole documents with the arguments given."""
    return FastTextClassifierFilter(args.model, keep_labels=label_scores(args.keep),
                                    remove_labels=label_scores(args.remove), newline_replacement=args.newline)


def url_filter(args) -> URLFilter:
    """datatrove's URL filter with the list files of --lists as its extra lists."""
    lists = {}
    handles = []
    for arg, name in LISTS.items():
        path = os.path.join(args.lists, name) if args.lists else None
        if path and os.path.isfile(path):
            handle = open(path, encoding="utf-8")  # noqa: SIM115 -- read by URLFilter's constructor
            handles.append(handle)
            lists[arg] = handle
    step = URLFilter(soft_word_threshold=args.soft_threshold, use_integrated_lists=args.integrated, **lists)
    for handle in handles:
        handle.close()
    return step


def document(kind: str, i: int, item: dict) -> Document:
    """A datatrove Document of one input line."""
    if kind == "url":
        return Document(text="", id=str(i), metadata={"url": item["url"]})
    return Document(text=item["text"], id=str(i))


def decide(kind: str, step, items: list[dict]) -> list:
    """Per document: [kept, scores] (fasttext) or [kept, reason] (url)."""
    out = []
    for i, item in enumerate(items):
        doc = document(kind, i, item)
        result = step.filter(doc)
        if kind == "url":
            out.append([True, None] if result is True else [False, result[1]])
        else:
            out.append([bool(result), {k: v for k, v in doc.metadata.items() if k.startswith("__label__")}])
    return out


def timed(kind: str, step, items: list[dict]) -> dict:
    """The filter's run() over every document on one core, one document first untimed."""
    sum(1 for _ in step.run(iter([document(kind, -1, items[0])])))
    docs = (document(kind, i, item) for i, item in enumerate(items))
    start, wall = time.process_time(), time.perf_counter()
    kept = sum(1 for _ in step.run(docs))
    return {"docs": len(items), "seconds": time.process_time() - start, "wall": time.perf_counter() - wall,
            "kept": kept}


def main() -> None:
    """Decide (or time) and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("fasttext", "url"))
    ap.add_argument("docs")
    ap.add_argument("out")
    ap.add_argument("--model")
    ap.add_argument("--keep")
    ap.add_argument("--remove")
    ap.add_argument("--newline", default="")
    ap.add_argument("--lists")
    ap.add_argument("--integrated", action="store_true")
    ap.add_argument("--soft_threshold", type=int, default=2)
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    items = read_docs(args.docs)
    step = fasttext_filter(args) if args.kind == "fasttext" else url_filter(args)
    if args.time:
        result = timed(args.kind, step, items)
        print("TIME " + json.dumps(result))
    else:
        result = decide(args.kind, step, items)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
