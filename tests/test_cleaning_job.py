"""The cleaning stages in the whole job: every stage on, through the registry, as a user runs them.

`--filters gopher_quality,gopher_repetition,c4_quality,fineweb_quality --languages en --pii email,ip`
on documents made to pass or fail each stage: removed/ lists exactly what the stages decide, in
process, with their rules (and a language removal's language and score); the counts add up; the
kept texts are the cleaned ones (a C4 cut's tokens are those of its modified text); the manifest
counts documents and tokens per language and PII replacements per subset; the bytes are the same on
one worker and the default count, also with dedup and decontamination on, with best-fit packing
(and on PortableRunner) and with Megatron output (shards, removed/ and dead letters); Megatron's
output and best-fit packing take the same stages; the tokenizer sample is cleaned the same way.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, pile_line, run_free, write_lines

from pipeline.cli import run, train_tokenizer
from pipeline.format.summary import label_lines
from pipeline.stages.base import Doc, Keep, Remove
from pipeline.stages.c4_quality import C4Quality
from pipeline.stages.fineweb_quality import FineWebQuality
from pipeline.stages.gopher_quality import GopherQuality
from pipeline.stages.gopher_repetition import GopherRepetition
from pipeline.stages.language import Language, LanguageOptions
from pipeline.stages.pii import Pii, PiiOptions

pytestmark = pytest.mark.slow

STAGE_FLAGS = ["--filters", "gopher_quality,gopher_repetition,c4_quality,fineweb_quality",
               "--languages", "en", "--pii", "email,ip"]
NOUNS = ("river", "garden", "letter", "market", "signal", "forest", "bridge", "castle", "window", "teacher",
         "station", "village", "harbour", "library", "engine", "doctor", "kitchen", "museum", "island", "pilot")
VERBS = ("describes", "follows", "reaches", "protects", "crosses", "measures", "repairs", "visits", "builds")
ADJS = ("quiet", "narrow", "ancient", "bright", "heavy", "simple", "distant", "careful", "modern", "gentle")
GERMAN = ("Der Fluss fließt ruhig durch das alte Tal, und die Menschen gehen am Ufer spazieren.",
          "Im Sommer arbeiten viele Bauern auf den Feldern, während die Kinder im Garten spielen.",
          "Die Bibliothek der Stadt besitzt eine große Sammlung von Büchern über die Geschichte.",
          "Nach dem Regen scheint die Sonne wieder, und die Straßen trocknen langsam in der Wärme.",
          "Der Lehrer erklärt den Schülern die Regeln, bevor sie mit der schwierigen Aufgabe beginnen.",
          "Am Abend treffen sich die Nachbarn auf dem Marktplatz, um über den Tag zu sprechen.")


def _sentence(rng: random.Random) -> str:
    n1, n2, n3 = rng.sample(NOUNS, 3)
    return (f"The {rng.choice(ADJS)} {n1} {rng.choice(VERBS)} the {n2} of the {rng.choice(ADJS)} {n3} "
            f"and {rng.choice(('stays', 'waits', 'returns', 'rests'))} there with {rng.choice(ADJS)} care.")


def _prose(rng: random.Random, lines: int = 8) -> str:
    return "\n".join(_sentence(rng) for _ in range(lines))


def _documents() -> dict[tuple[int, int], tuple[str, str]]:
    """(file, line) -> (text, subset): documents that pass, and fail each stage."""
    rng = random.Random(5)
    docs = {}
    kinds = [
        lambda: _prose(rng),  # passes everything
        lambda: _prose(rng) + "\nWrite to jane.doe@example.net or visit 8.8.8.8 for the full report today.",  # pii
        lambda: _prose(rng) + "\nSee our Privacy Policy\nclick here",  # c4 cuts two lines
        lambda: "The short note of the day.",  # gopher_short_doc
        lambda: "\n".join([_sentence(rng)] * 6),  # repeated lines: gopher_repetition
        lambda: _prose(rng) + "\nThe set is {1, 2} and that is the end of it.",  # c4 curly_bracket
        lambda: "\n".join(GERMAN) + "\nThe end of the story, to be and to have.",  # language (de)
        lambda: (lambda p: p + "\n" + p.split("\n")[0])(_prose(rng, 9)),  # one repeated line: fineweb char_dup
    ]
    for f in range(2):
        for line in range(1, 25):
            docs[(f, line)] = (kinds[(line + f) % len(kinds)](), ("Pile-CC", "Github")[line % 2])
    return docs


DOCS = _documents()


def _expected(docs: dict) -> dict:
    """(file, line) -> (reason, rule, fields, text kept, cut, tally, labels): the stages applied in process."""
    stages = [GopherQuality(), GopherRepetition(), C4Quality(), FineWebQuality(),
              Language(LanguageOptions(languages=("en",))), Pii(PiiOptions(pii=("email", "ip")))]
    for stage in stages:
        stage.setup()
    out = {}
    for key, (text, subset) in docs.items():
        cut, tally, labels, verdict = None, {}, {}, None
        for stage in stages:
            result = stage.apply(Doc(text, subset, key[0], key[1]))
            if isinstance(result, Remove):
                verdict = (stage.name, result.rule, dict(result.fields))
                break
            if isinstance(result, Keep):
                if result.cut_rule:
                    cut = result.cut_rule
                text = result.text if result.text is not None else text
                tally.update({stage.name: dict(result.tally)} if result.tally else {})
                labels.update(result.labels)
        out[key] = (verdict, text, cut, tally, labels)
    return out


EXPECTED = _expected(DOCS)


def _argv(root: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(root / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "64", "--chunk_mb", "0.004", *more]


def _removed(out: Path, manifest: dict) -> dict:
    records = {}
    for entry in manifest["removed"]["files"]:
        for line in (out / entry["path"]).read_text().splitlines():
            r = json.loads(line)
            records.setdefault((r["file_index"], r["line"]), []).append(r)
    return records


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cleaning")
    for f, name in enumerate(("a", "b")):
        write_lines(str(root / f"{name}.jsonl.zst"),
                    [pile_line(*DOCS[(f, line)]) for line in range(1, 25)])
    return root


@pytest.fixture(scope="module")
def cleaned(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("cleaned") / "out"
    argv = _argv(corpus, out, tiny_model, *STAGE_FLAGS)
    return argv, out, run.main(argv + ["--runner", "DirectRunner"])


def test_the_corpus_exercises_every_stage():
    reasons = {v[0][0] for v in EXPECTED.values() if v[0]}
    assert reasons == {"gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality", "language"}
    assert any(v[2] for v in EXPECTED.values()) and any(v[3] for v in EXPECTED.values())
    assert sum(1 for v in EXPECTED.values() if v[0] is None) >= 12


def test_removed_lists_what_the_stages_decide(cleaned):
    _, out, manifest = cleaned
    removed = _removed(out, manifest)
    for key, (verdict, _, cut, _, _) in EXPECTED.items():
        records = removed.get(key, [])
        if verdict:
            (r,) = records
            assert (r["reason"], r["rule"]) == verdict[:2], key
            assert {k: r[k] for k in verdict[2]} == verdict[2]
            if verdict[0] == "language":
                assert r["language"] == "de" and 0 < r["language_score"] <= 1
        elif cut:
            (r,) = records
            assert (r["reason"], r["rule"]) == ("c4_quality_cut", "c4_lines_removed"), key
        else:
            assert not records, key


def test_counts_add_up_and_count_languages_and_pii(cleaned):
    _, _, manifest = cleaned
    for name, s in manifest["subsets"].items():
        mine = {k: v for k, v in EXPECTED.items() if DOCS[k][1] == name}
        assert s["kept"] + sum(s["removed"].values()) + sum(s.get("filtered", {}).values()) == s["documents"]
        assert s["documents"] == len(mine)
        want: dict[str, int] = {}
        for verdict, *_ in mine.values():
            if verdict:
                want[verdict[0]] = want.get(verdict[0], 0) + 1
        assert s["removed"] == want
        kept = [v for v in mine.values() if v[0] is None]
        assert s["labels"]["language"]["en"]["documents"] == len(kept)
        assert s["labels"]["language"]["en"]["tokens"] == s["tokens"]
        pii = {}
        for v in kept:
            for kind, n in v[3].get("pii", {}).items():
                pii[kind] = pii.get(kind, 0) + n
        assert s.get("tallies", {}).get("pii", {}) == pii
    assert manifest["config"]["filters"] == ["gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality"]
    kept = sum(1 for v in EXPECTED.values() if v[0] is None)
    tokens = sum(s["tokens"] for s in manifest["subsets"].values())
    assert label_lines(manifest) == [f"language: en {kept:,} documents {tokens:,} tokens"]
    assert manifest["config"]["languages"] == ["en"] and manifest["config"]["pii"] == ["email", "ip"]


def test_the_text_written_is_the_cleaned_text(corpus, tiny_model, tmp_path):
    # The kept documents' cleaned texts, written as a corpus of their own and tokenized without any
    # stage (one chunk per file, both runs), give the same shards: a C4 cut's tokens are those of
    # its modified text, PII's those of the redacted one.
    manifest = run.main(_argv(corpus, tmp_path / "out", tiny_model, *STAGE_FLAGS) + ["--chunk_mb", "1"] + FAST_BEAM)
    for f, name in enumerate(("a", "b")):
        write_lines(str(tmp_path / f"{name}.jsonl.zst"),
                    [pile_line(EXPECTED[(f, line)][1], DOCS[(f, line)][1]) for line in range(1, 25)
                     if EXPECTED[(f, line)][0] is None])
    plain = run.main(_argv(tmp_path, tmp_path / "plain", tiny_model) + ["--chunk_mb", "1"] + FAST_BEAM)
    assert [s["sha256"] for s in plain["shards"]] == [s["sha256"] for s in manifest["shards"]]


def test_one_worker_writes_the_same_bytes(cleaned):
    argv, out, manifest = cleaned
    digests = output_digests(out)
    again = run.main(argv + ["--overwrite"] + FAST_BEAM)
    assert output_digests(out) == digests and run_free(again) == run_free(manifest)


@pytest.mark.parametrize("extra", [["--output_format", "megatron"], ["--packing", "best_fit"]])
def test_other_formats_and_packings_take_the_same_stages(extra, corpus, tiny_model, tmp_path):
    out = tmp_path / "out"
    manifest = run.main(_argv(corpus, out, tiny_model, *STAGE_FLAGS, *extra) + FAST_BEAM)
    removed = _removed(out, manifest)
    assert {k for k, rs in removed.items() if rs[0]["reason"] != "c4_quality_cut"} == {
        k for k, v in EXPECTED.items() if v[0]}
    assert sum(s["kept"] for s in manifest["subsets"].values()) == sum(1 for v in EXPECTED.values() if v[0] is None)


def test_the_tokenizer_sample_is_cleaned(corpus, tmp_path):
    work = tmp_path / "work"
    train_tokenizer.main(["--input", str(corpus / "*.jsonl.zst"), "--work_dir", str(work), "--sample_only",
                          "--weights", "natural", *STAGE_FLAGS, *FAST_BEAM])
    texts = sorted(json.loads(line)["text"] for line in (work / "sample.jsonl").read_text().splitlines())
    assert texts == sorted(v[1] for v in EXPECTED.values() if v[0] is None)


@pytest.fixture(scope="module")
def every_stage(corpus, tmp_path_factory):
    """The corpus plus a file of duplicates, a near duplicate, a contaminated document and two dead
    letters, and an eval set: every stage and dedup and decontamination have something to do."""
    rng = random.Random(11)
    root = tmp_path_factory.mktemp("every_stage")
    for name in ("a", "b"):
        (root / f"{name}.jsonl.zst").write_bytes((corpus / f"{name}.jsonl.zst").read_bytes())
    kept = [DOCS[k][0] for k, v in EXPECTED.items() if v[0] is None and not v[2] and not v[3]]
    contaminated = _prose(rng, 9)
    near = kept[1].split(" ")
    near[3] = "velvet"
    write_lines(str(root / "c.jsonl.zst"), [
        pile_line(kept[0]), pile_line(kept[0], "Github"), pile_line(" ".join(near)), pile_line(contaminated),
        b'{"text": "not json', pile_line(_prose(rng), "No Such Subset"), pile_line(_prose(rng))])
    (root / "eval.txt").write_text(contaminated.split("\n")[4])
    return root


@pytest.mark.parametrize("extra, portable", [(["--packing", "best_fit"], True),
                                             (["--output_format", "megatron", "--decontam_cut"], False)])
def test_every_stage_writes_the_same_bytes_on_any_workers_and_runner(extra, portable, every_stage, tiny_model,
                                                                     tmp_path):
    # Shards, removed/, dead letters and the manifest: the same bytes on the default workers
    # (DirectRunner's processes, one per core), on one worker in memory, and (once) on
    # PortableRunner, the path Flink and Spark take, with every stage on.
    flags = [*STAGE_FLAGS, "--dedup", "near", "--decontaminate", str(every_stage / "eval.txt"),
             "--max_dead_letter_fraction", "0.5", *extra]
    argv = ["--input", str(every_stage / "*.jsonl.zst"), "--tokenizer_model", tiny_model, "--seq_len", "64",
            "--chunk_mb", "0.004", *flags]
    two = run.main([*argv, "--output_dir", str(tmp_path / "two"), "--runner", "DirectRunner"])
    one = run.main([*argv, "--output_dir", str(tmp_path / "one"), *FAST_BEAM])
    digests = output_digests(tmp_path / "two")
    assert digests == output_digests(tmp_path / "one") and run_free(two) == run_free(one)
    if portable:
        config = Path(__file__).resolve().parents[1] / "beam_configs" / "portable_embed.toml"
        other = run.main([*argv, "--output_dir", str(tmp_path / "portable"), "--config", str(config)])
        assert output_digests(tmp_path / "portable") == digests and run_free(other) == run_free(two)
    assert any(path.startswith("dead_letters/") for path in digests), sorted(digests)
    removed = _removed(tmp_path / "two", two)
    reasons = {r["reason"] for rs in removed.values() for r in rs}
    assert {"gopher_quality", "gopher_repetition", "c4_quality", "c4_quality_cut", "fineweb_quality", "language",
            "duplicate_exact", "duplicate_near"} <= reasons, reasons
    assert ("contaminated_cut" if "--decontam_cut" in extra else "contaminated") in reasons
    assert any(s.get("tallies", {}).get("pii") for s in two["subsets"].values())
