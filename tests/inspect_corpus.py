"""A corpus for the inspection commands' tests: documents each stage, dedup and decontamination act on.

Four inputs of four kinds (zstd, gzip and plain JSON lines, Parquet), documents that pass and that
fail or are cut by each of `FLAGS`' stages, an exact duplicate across files, a document holding an
eval set's 13 words (cut by decontamination), and, apart, hostile documents: HTML and `</script>`,
control characters, a 10 MB line. `expected()` applies the stages in process to say what the job
keeps of each document, independently of the commands under test.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from corpus_helpers import pile_line, write_lines

from pipeline.stages.base import Doc, Keep, Remove
from pipeline.stages.c4_quality import C4Quality
from pipeline.stages.fineweb_quality import FineWebQuality
from pipeline.stages.gopher_quality import GopherQuality
from pipeline.stages.language import Language, LanguageOptions
from pipeline.stages.pii import Pii, PiiOptions

FLAGS = ["--filters", "gopher_quality,c4_quality,fineweb_quality", "--languages", "en", "--pii", "email,ip",
         "--dedup", "exact", "--decontaminate", "<root>/eval/eval.jsonl", "--decontam_cut"]
NOUNS = ("river", "garden", "letter", "market", "signal", "forest", "bridge", "castle", "window", "teacher",
         "station", "village", "harbour", "library", "engine", "doctor", "kitchen", "museum", "island", "pilot")
VERBS = ("describes", "follows", "reaches", "protects", "crosses", "measures", "repairs", "visits", "builds")
ADJS = ("quiet", "narrow", "ancient", "bright", "heavy", "simple", "distant", "careful", "modern", "gentle")
GERMAN = ("Der Fluss fließt ruhig durch das alte Tal, und die Menschen gehen am Ufer spazieren.",
          "Im Sommer arbeiten viele Bauern auf den Feldern, während die Kinder im Garten spielen.",
          "Die Bibliothek der Stadt besitzt eine große Sammlung von Büchern über die Geschichte.",
          "Nach dem Regen scheint die Sonne wieder, und die Straßen trocknen langsam in der Wärme.")
EVAL_TEXT = "the lighthouse keeper counted seven silver boats drifting slowly past the northern reef at dawn"
FILES = ("a.jsonl.zst", "b.jsonl.gz", "c.jsonl", "d.parquet")
PER_FILE = 18
SUBSETS = ("Pile-CC", "Github", "ArXiv")


def _sentence(rng: random.Random) -> str:
    n1, n2, n3 = rng.sample(NOUNS, 3)
    return (f"The {rng.choice(ADJS)} {n1} {rng.choice(VERBS)} the {n2} of the {rng.choice(ADJS)} {n3} "
            f"and {rng.choice(('stays', 'waits', 'returns', 'rests'))} there with {rng.choice(ADJS)} care.")


def _prose(rng: random.Random, lines: int = 8) -> str:
    return "\n".join(_sentence(rng) for _ in range(lines))


def documents() -> dict[tuple[int, int], tuple[str, str]]:
    """(file index, line) -> (text, subset)."""
    rng = random.Random(11)
    kinds = [
        lambda: _prose(rng),  # kept
        lambda: _prose(rng) + "\nWrite to jane.doe@example.net or visit 8.8.8.8 for the full report today.",  # pii
        lambda: _prose(rng) + "\nSee our Privacy Policy\nclick here",  # c4 cuts two lines
        lambda: "The short note of the day.",  # gopher_short_doc
        lambda: _prose(rng) + "\nThe set is {1, 2} and that is the end of it.",  # c4 curly_bracket
        lambda: "\n".join(GERMAN) + "\nThe end of the story, to be and to have.",  # language (de)
        lambda: (lambda p: p + "\n" + p.split("\n")[0])(_prose(rng, 9)),  # fineweb char_dup_ratio
        lambda: _prose(rng, 4) + "\nAnd " + EVAL_TEXT + ", as the report of the day says.\n" + _prose(rng, 4),
    ]
    docs = {}
    for f in range(len(FILES)):
        for line in range(1, PER_FILE + 1):
            docs[(f, line)] = (kinds[(line + f) % len(kinds)](), SUBSETS[(line + f) % len(SUBSETS)])
    docs[(1, PER_FILE)] = docs[(0, 1)]  # an exact duplicate of a kept document, in another file
    return docs


def write(root: Path) -> dict:
    """Write the four inputs and the eval set under `root`; returns the documents."""
    docs = documents()
    for f, name in enumerate(FILES):
        rows = [docs[(f, line)] for line in range(1, PER_FILE + 1)]
        if name.endswith(".parquet"):
            table = pa.table({"text": [t for t, _ in rows], "meta": [{"pile_set_name": s} for _, s in rows]})
            pq.write_table(table, root / name, row_group_size=7)
        else:
            write_lines(str(root / name), [pile_line(t, s) for t, s in rows], name.rsplit(".", 1)[-1]
                        if name.endswith((".zst", ".gz")) else "plain")
    (root / "eval").mkdir(exist_ok=True)
    (root / "eval" / "eval.jsonl").write_text(json.dumps({"text": EVAL_TEXT}) + "\n")
    return docs


def flags(root: Path) -> list[str]:
    """The job's stage, dedup and decontamination flags for the corpus at `root`."""
    return [f.replace("<root>", str(root)) for f in FLAGS]


def expected(docs: dict) -> dict:
    """(file, line) -> (removal (reason, rule) or None, the text the stages keep): the stages in process."""
    stages = [GopherQuality(), C4Quality(), FineWebQuality(), Language(LanguageOptions(languages=("en",))),
              Pii(PiiOptions(pii=("email", "ip")))]
    for stage in stages:
        stage.setup()
    out = {}
    for key, (text, subset) in docs.items():
        verdict = None
        for stage in stages:
            result = stage.apply(Doc(text, subset, key[0], key[1]))
            if isinstance(result, Remove):
                verdict = (stage.name, result.rule)
                break
            if isinstance(result, Keep) and result.text is not None:
                text = result.text
        out[key] = (verdict, text)
    return out


HOSTILE = "<script>alert(1)</script></pre></td><img src=x onerror=alert(2)> \x1b[31m\u202e\x00 "


def write_hostile(root: Path) -> list[str]:
    """One input of hostile documents (and one kept, so that the job has records); their texts."""
    ok = "\n".join(["The committee reviewed the proposal and agreed that the budget should be revised with care."] * 6)
    texts = [(HOSTILE * (10_000_000 // len(HOSTILE) + 1))[:10_000_000],
             "short </script><script>document.title='pwned'</script><!-- \x07\x1b[2J bye {",
             ok]
    write_lines(str(root / "hostile.jsonl.zst"), [pile_line(t) for t in texts])
    return texts
