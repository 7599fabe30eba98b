"""Compose a small corpus in the exact Pile layout and line format, deterministically.

`python scripts/datagen/sample_corpus.py OUT_DIR` writes OUT_DIR/train/00.jsonl.zst ... plus
val.jsonl.zst and test.jsonl.zst: one `{"text": ..., "meta": {"pile_set_name": ...}}` per line,
every one of the 22 subset names, short and very long documents, code, math, non-ASCII text (CJK,
accents, emoji). All text is composed here from a seeded generator (no copied text), so the same
arguments give the same bytes. `--scale` multiplies the size (benchmarks use it).

`python scripts/datagen/sample_corpus.py --kind notes OUT_DIR` writes a corpus in a layout of its own
instead (sample_data/notes/: what a user's JSON lines look like): part-00.jsonl and
part-01.jsonl.gz, one `{"id": ..., "body": ..., "source": {"name": ..., "url": ...}}` per line,
subsets "forum", "manuals", "recipes" and one Pile name ("Wikipedia (en)"); some lines have no
`source` and one has an empty body. Run it with `--text_key body --subset_key source.name
--subset_names any --default_subset misc`.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import random

import zstandard

from pipeline.core.subsets import PILE_SUBSETS

_WORDS = (
    "the of and to in is that for on with as by at from this be are was it an or which has have not "
    "data model system time value result method study process number first new used can between one "
    "two three large small high low long short early late public general local national water light "
    "city river court patient cell protein energy market market's field theory network language "
    "function memory signal sample paper report season game player team album song film book story "
    "history century government school university research analysis effect level group rate order "
    "power form line point case part area road house family world country state town village north "
    "south east west after before during under over through about against among within without"
).split()
_NAMES = "Ada Bruno Chen Dana Elif Farid Grace Hiro Ines Jonas Kofi Lena Mateo Nadia Omar Priya".split()
_CJK = "数据模型系统时间结果方法研究过程语言网络学习训练文本日本語の文章を書きます한국어문장"
_EMOJI = ["🙂", "🚀", "📚", "✨", "🌍", "🔬", "🎵", "🧪"]
_DE = "der die das und ist nicht für über Straße Mädchen schön Größe Bücher".split()
_FR = "le la les et est pour très été déjà français où garçon naïve".split()
_ES = "el la los y es para año señor niño también cómo está".split()


_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "er", "an", "is")]


def _make_lexicon(size: int = 6000) -> list[str]:
    # Pseudo-words of 1-4 syllables give a realistic spread of rare and common pieces.
    rng = random.Random(1234)
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))) for _ in range(size)]


_LEXICON = _make_lexicon()
_ZIPF_CUMULATIVE = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(_LEXICON))))


def _word(rng: random.Random, words) -> str:
    if words is _WORDS and rng.random() < 0.45:
        return rng.choices(_LEXICON, cum_weights=_ZIPF_CUMULATIVE)[0]
    return rng.choice(words)


def _sentence(rng: random.Random, words=_WORDS) -> str:
    n = rng.randint(6, 22)
    s = " ".join(_word(rng, words) for _ in range(n))
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!"])


def _paragraphs(rng: random.Random, count: int, words=_WORDS) -> str:
    return "\n\n".join(" ".join(_sentence(rng, words) for _ in range(rng.randint(2, 7))) for _ in range(count))


def _code(rng: random.Random) -> str:
    name = rng.choice(["parse", "load", "merge", "count", "render", "encode"]) + "_" + rng.choice(_WORDS)
    args = ", ".join(rng.sample(["data", "path", "limit", "seed", "items", "config"], rng.randint(1, 3)))
    body = []
    for i in range(rng.randint(3, 12)):
        body.append(f"    x{i} = {rng.randint(0, 999)} * len({args.split(', ')[0]}) + {rng.random():.4f}")
    body.append(f"    return {{'{name}': x0, \"n\": {rng.randint(1, 10**6)}}}")
    c = (
        f"static int {name}_c(const char *buf, size_t n) {{\n    for (size_t i = 0; i < n; ++i) "
        f"{{ if (buf[i] == '\\t') return -1; }}\n    return 0;\n}}\n"
    )
    return f'def {name}({args}):\n    """{_sentence(rng)}"""\n' + "\n".join(body) + "\n\n\n" + c


def _math(rng: random.Random) -> str:
    a, b, x = rng.randint(2, 99), rng.randint(-500, 500), rng.randint(-50, 50)
    return f"Solve {a}*x + {b} = {a * x + b} for x.\n{x}"


def _latex(rng: random.Random) -> str:
    i = rng.randint(1, 9)
    return (
        _paragraphs(rng, 2)
        + f"\n\nLet $f(x) = \\sum_{{k=0}}^{{{i}}} a_k x^k$ with $a_k \\in \\mathbb{{R}}$. Then "
        + f"\\begin{{equation}}\\int_0^1 f(x)\\,dx = \\sum_k \\frac{{a_k}}{{k+1}} \\approx {rng.random():.6f}."
        + "\\end{equation}\n"
        + _paragraphs(rng, 1)
    )


def _chat(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(5, 30)):
        h, m = rng.randint(0, 23), rng.randint(0, 59)
        lines.append(f"[{h:02d}:{m:02d}] <{rng.choice(_NAMES).lower()}> {_sentence(rng).lower()}")
    return "\n".join(lines)


def _email(rng: random.Random) -> str:
    a, b = rng.sample(_NAMES, 2)
    return (
        f"From: {a.lower()}@example.com\nTo: {b.lower()}@example.com\nSubject: {_sentence(rng)[:40]}\n\n"
        f"{b},\n\n{_paragraphs(rng, 2)}\n\nThanks,\n{a}"
    )


def _multilingual(rng: random.Random) -> str:
    return "\n\n".join(
        [_paragraphs(rng, 1, _DE), _paragraphs(rng, 1, _FR), _paragraphs(rng, 1, _ES), _paragraphs(rng, 1)]
    )


def _cjk_emoji(rng: random.Random) -> str:
    cjk = "".join(rng.choice(_CJK) for _ in range(rng.randint(20, 200)))
    return f"{_sentence(rng)} {cjk} {' '.join(rng.choice(_EMOJI) for _ in range(5))} {_sentence(rng)}"


def _document(rng: random.Random, subset: str) -> str:
    if subset == "Github":
        return _code(rng)
    if subset == "DM Mathematics":
        return "\n".join(_math(rng) for _ in range(rng.randint(1, 6)))
    if subset in ("ArXiv", "PhilPapers", "PubMed Central"):
        return _latex(rng)
    if subset in ("Ubuntu IRC", "HackerNews"):
        return _chat(rng)
    if subset == "Enron Emails":
        return _email(rng)
    if subset == "EuroParl":
        return _multilingual(rng)
    if subset in ("Books3", "Gutenberg (PG-19)", "BookCorpus2"):
        return f"CHAPTER {rng.randint(1, 40)}\n\n" + _paragraphs(rng, rng.randint(20, 120))
    if subset in ("OpenSubtitles", "YoutubeSubtitles"):
        return "\n".join(_sentence(rng) for _ in range(rng.randint(5, 40)))
    if subset == "Wikipedia (en)" and rng.random() < 0.3:
        return _cjk_emoji(rng) + "\n\n" + _paragraphs(rng, 3)
    return _paragraphs(rng, rng.randint(1, 8))


def compose_lines(rng: random.Random, num_docs: int, long_doc_chars: int = 0) -> list[bytes]:
    """`num_docs` Pile lines cycling through all 22 subsets; optionally one very long book."""
    lines = []
    for i in range(num_docs):
        subset = PILE_SUBSETS[i % len(PILE_SUBSETS)] if i < len(PILE_SUBSETS) else rng.choice(PILE_SUBSETS)
        text = _document(rng, subset)
        lines.append({"text": text, "meta": {"pile_set_name": subset}})
    if long_doc_chars:
        parts = []
        while sum(map(len, parts)) < long_doc_chars:
            parts.append(_paragraphs(rng, 50))
        lines.insert(len(lines) // 2, {"text": "\n\n".join(parts), "meta": {"pile_set_name": "Books3"}})
    if num_docs > 40:
        # Real data has whitespace-only documents; the pipeline counts them as filtered.
        lines.insert(7, {"text": " \n ", "meta": {"pile_set_name": "Pile-CC"}})
    return [json.dumps(line, ensure_ascii=False).encode() for line in lines]


def write_jsonl_zst(path: str, lines: list[bytes]) -> None:
    """Write lines as one zstd frame (deterministic at a fixed level)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=10).compress(b"\n".join(lines) + b"\n"))


def write_sample_corpus(out_dir: str, train_files: int = 4, docs_per_file: int = 600, scale: float = 1.0,
                        seed: int = 0) -> list[str]:
    """Write the Pile layout under `out_dir`; returns the paths written."""
    rng = random.Random(seed)
    paths = []
    for i in range(train_files):
        path = os.path.join(out_dir, "train", f"{i:02d}.jsonl.zst")
        long_doc = 1_200_000 if i == 1 else 0
        write_jsonl_zst(path, compose_lines(rng, int(docs_per_file * scale), long_doc))
        paths.append(path)
    for split in ("val", "test"):
        path = os.path.join(out_dir, f"{split}.jsonl.zst")
        write_jsonl_zst(path, compose_lines(rng, max(44, int(docs_per_file * scale) // 6)))
        paths.append(path)
    return paths


NOTES_SUBSETS = ("forum", "manuals", "recipes", "Wikipedia (en)")


def _note(rng: random.Random, subset: str) -> str:
    if subset == "forum":
        return _chat(rng)
    if subset == "manuals":
        return _paragraphs(rng, rng.randint(1, 3)) + "\n\n" + _code(rng)
    if subset == "recipes":
        steps = "\n".join(f"{i + 1}. {_sentence(rng)}" for i in range(rng.randint(3, 8)))
        return f"{_sentence(rng)}\n\nServes {rng.randint(1, 8)}.\n\n{steps}"
    return _paragraphs(rng, rng.randint(1, 4))


def compose_notes(rng: random.Random, num_docs: int, first_id: int = 0) -> list[bytes]:
    """`num_docs` lines of the notes layout (see the module docstring)."""
    lines = []
    for i in range(num_docs):
        subset = NOTES_SUBSETS[i % len(NOTES_SUBSETS)] if i < len(NOTES_SUBSETS) else rng.choice(NOTES_SUBSETS)
        line = {"id": f"note-{first_id + i:05d}", "body": _note(rng, subset)}
        if i % 9 != 8:  # every ninth line has no source: --default_subset names it
            line["source"] = {"name": subset, "url": f"https://example.com/{subset.split()[0].lower()}/{i}"}
        lines.append(line)
    lines.insert(5, {"id": f"note-{first_id + num_docs:05d}", "body": "", "source": {"name": "forum"}})
    return [json.dumps(line, ensure_ascii=False).encode() for line in lines]


def write_notes_corpus(out_dir: str, docs_per_file: int = 60, seed: int = 0) -> list[str]:
    """Write the notes corpus under `out_dir` (plain and gzip, deterministic); returns the paths."""
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "part-00.jsonl"), os.path.join(out_dir, "part-01.jsonl.gz")]
    for i, path in enumerate(paths):
        data = b"\n".join(compose_notes(rng, docs_per_file, i * 1000)) + b"\n"
        with open(path, "wb") as f:
            f.write(gzip.compress(data, compresslevel=9, mtime=0) if path.endswith(".gz") else data)
    return paths


def main(argv=None) -> None:
    """CLI entry."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--kind", choices=("pile", "notes"), default="pile")
    p.add_argument("--train_files", type=int, default=4)
    p.add_argument("--docs_per_file", type=int, default=None)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.kind == "notes":
        paths = write_notes_corpus(args.out_dir, args.docs_per_file or 60, args.seed)
    else:
        paths = write_sample_corpus(args.out_dir, args.train_files, args.docs_per_file or 600, args.scale, args.seed)
    for path in paths:
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
