"""A stage of the test's own, added through the registry alone, through the whole job and the tokenizer sample.

No DoFn knows the toy stage: registering it and naming it in --filters is all it takes. Its
removals and cuts are listed in removed/ with exact counts in the manifest, the text written is
the stage's, the bytes are the same on one worker and the default count, with dedup the stage runs
before it, and the tokenizer sample keeps what the job keeps.
"""

import dataclasses
import json
import os
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, pile_line, run_free, write_lines

from pipeline.cli import run, train_tokenizer
from pipeline.core.options import option
from pipeline.stages import registry
from pipeline.stages.base import DocumentStage, Keep, Remove

pytestmark = pytest.mark.slow

DEFAULT_WORKERS = ["--runner", "DirectRunner"]  # all cores (processes or threads, as the job chooses)
TWO_PROCESSES = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    toy_word: str = option("banana", help="a document holding this word is removed")


class ToyStage(DocumentStage):
    """Removes documents holding a word; keeps `CUT <rest>` as `<rest>`, listed as a cut, labelled."""

    name = "toy"
    Options = ToyOptions

    def setup(self):
        self.ready = True  # what a model's load would be; apply fails without it

    def apply(self, doc):
        assert self.ready
        if self.options.toy_word in doc.text.split():
            return Remove("has_word", {"word": self.options.toy_word})
        if doc.text.startswith("CUT "):
            return Keep(text=doc.text[4:], cut_rule="cut_prefix", tally={"cut_chars": 4}, labels={"kind": "cut"})
        return Keep(labels={"kind": "plain"})


def _words(i: int, n: int = 40) -> str:
    return " ".join(f"w{(i * 7919 + k * 104729) % 997}" for k in range(n))


# (file, line) -> (text, subset); None: a bad line
DOCS = {}
for _f, _subset in enumerate(("Pile-CC", "Github")):
    for _line in range(1, 31):
        _text = _words(_f * 100 + _line)
        if _line % 7 == 0:
            _text += " banana split"
        elif _line % 5 == 0:
            _text = "CUT " + _text
        DOCS[(_f, _line)] = (_text, _subset)
DOCS[(0, 11)] = ("   ", "Pile-CC")  # empty: filtered before any stage
DOCS[(1, 12)] = None
REMOVED = {k for k, v in DOCS.items() if v and "banana" in v[0].split()}
CUT = {k for k, v in DOCS.items() if v and v[0].startswith("CUT ")}


def _write(root: Path, docs: dict) -> None:
    for f, name in enumerate(("a", "b")):
        lines = [b"{bad" if docs[(f, line)] is None else pile_line(*docs[(f, line)])
                 for line in range(1, 31) if (f, line) in docs]
        write_lines(str(root / f"{name}.jsonl.zst"), lines)


@pytest.fixture(scope="module")
def toy_stage():
    """The toy stage in the registry; the workers import this module by its name, as a user's workers would theirs."""
    registry.register(ToyStage)
    with pytest.MonkeyPatch.context() as patch:
        here = str(Path(__file__).parent)
        patch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        yield ToyStage
    registry.unregister("toy")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy_corpus")
    _write(root, DOCS)
    return root


def _argv(root: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(root / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "32", "--chunk_mb", "0.002", "--max_dead_letter_fraction", "1", *more]


def _removed(out: Path, manifest: dict) -> dict:
    records = {}
    for entry in manifest["removed"]["files"]:
        for line in (out / entry["path"]).read_text().splitlines():
            r = json.loads(line)
            records.setdefault((r["file_index"], r["line"]), []).append(r)
    return records


@pytest.fixture(scope="module")
def toy_run(toy_stage, corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("toy") / "out"
    argv = _argv(corpus, out, tiny_model, "--filters", "toy")
    return argv, out, run.main(argv + DEFAULT_WORKERS)


def test_its_removals_and_cuts_are_listed_with_exact_counts(toy_run):
    _, out, manifest = toy_run
    removed = _removed(out, manifest)
    assert set(removed) == REMOVED | CUT
    for key in REMOVED:
        (r,) = removed[key]
        assert (r["reason"], r["rule"], r["word"], r["subset"]) == ("toy", "has_word", "banana", DOCS[key][1])
        assert r["file"].endswith(("a.jsonl.zst", "b.jsonl.zst")[key[0]])
    for key in CUT:
        (r,) = removed[key]
        assert (r["reason"], r["rule"]) == ("toy_cut", "cut_prefix")
    entry = manifest["removed"]
    assert entry["by_reason"] == {"toy": len(REMOVED)} and entry["cut"] == len(CUT)
    assert entry["cut_by_reason"] == {"toy_cut": len(CUT)} and entry["records"] == len(REMOVED) + len(CUT)
    assert set(entry["tokens_by_reason"]) == {"toy"} and entry["tokens_by_reason"]["toy"] > 0
    assert len(entry["files"]) == 2  # one per input file (a span of chunks each)
    for name, s in manifest["subsets"].items():
        mine = [k for k, v in DOCS.items() if v and v[1] == name]
        assert s["documents"] == len(mine)
        assert s["removed"] == {"toy": len(REMOVED & set(mine))}
        assert s["kept"] + sum(s["removed"].values()) + sum(s["filtered"].values()) == s["documents"]
        assert s["tallies"] == {"toy": {"cut_chars": 4 * len(CUT & set(mine))}}
        labels = s["labels"]["kind"]
        assert labels["cut"]["documents"] == len(CUT & set(mine))
        assert labels["cut"]["documents"] + labels["plain"]["documents"] == s["kept"]
        assert labels["cut"]["tokens"] + labels["plain"]["tokens"] == s["tokens"]
    assert manifest["subsets"]["Pile-CC"]["filtered"] == {"empty_text": 1}
    assert manifest["config"]["filters"] == ["toy"] and manifest["config"]["toy_word"] == "banana"


def test_one_worker_writes_the_same_bytes(toy_run):
    argv, out, manifest = toy_run
    digests = output_digests(out)
    again = run.main(argv + ["--overwrite"] + FAST_BEAM)
    assert output_digests(out) == digests and run_free(again) == run_free(manifest)


def test_the_text_written_is_the_stage_s(toy_stage, corpus, tiny_model, tmp_path):
    """The shards equal those of a run without stages over the corpus the stage leaves (one chunk per file)."""
    manifest = run.main(_argv(corpus, tmp_path / "toy", tiny_model, "--filters", "toy", "--chunk_mb", "1")
                        + FAST_BEAM)
    cleaned = {k: None if v is None else (v[0][4:] if k in CUT else v[0], v[1])
               for k, v in DOCS.items() if k not in REMOVED}
    _write(tmp_path / "cleaned", cleaned)
    plain = run.main(_argv(tmp_path / "cleaned", tmp_path / "plain", tiny_model, "--chunk_mb", "1") + FAST_BEAM)
    assert "removed" not in plain and "filters" not in plain["config"]
    assert [s["sha256"] for s in plain["shards"]] == [s["sha256"] for s in manifest["shards"]]


def test_with_dedup_the_stage_runs_first(toy_stage, tiny_model, tmp_path):
    """Dedup sees the text the stage left and never a document it removed; every record is listed once."""
    docs = {(0, 1): ("alpha beta gamma banana", "Pile-CC"),  # removed by the stage: its copy survives
            (0, 2): ("alpha beta gamma banana", "Pile-CC"),
            (0, 3): ("delta epsilon", "Pile-CC"),
            (0, 4): ("CUT delta epsilon", "Pile-CC"),  # the same text once cut: a duplicate of (0, 3)
            (1, 1): ("CUT zeta eta", "Github"), (1, 2): ("theta", "Github")}
    _write(tmp_path / "in", docs)
    out = tmp_path / "out"
    manifest = run.main(_argv(tmp_path / "in", out, tiny_model, "--filters", "toy", "--toy_word", "gamma",
                              "--dedup", "exact") + TWO_PROCESSES)
    removed = _removed(out, manifest)
    assert {k: [r["reason"] for r in rs] for k, rs in removed.items()} == {
        (0, 1): ["toy"], (0, 2): ["toy"], (0, 4): ["duplicate_exact"], (1, 1): ["toy_cut"]}
    assert manifest["removed"]["by_reason"] == {"toy": 2, "duplicate_exact": 1}
    assert manifest["config"]["toy_word"] == "gamma" and manifest["config"]["dedup"] == "exact"
    s = manifest["subsets"]["Pile-CC"]
    assert s["kept"] == 1 and s["kept"] + sum(s["removed"].values()) == s["documents"] == 4


def test_megatron_output_with_the_stage(toy_stage, corpus, tiny_model, tmp_path):
    out = tmp_path / "out"
    manifest = run.main(_argv(corpus, out, tiny_model, "--filters", "toy", "--output_format", "megatron")
                        + FAST_BEAM)
    assert set(_removed(out, manifest)) == REMOVED | CUT
    kept = len([v for v in DOCS.values() if v and v[0].strip()]) - len(REMOVED)
    assert manifest["totals"]["documents"] == kept


def test_the_tokenizer_sample_keeps_what_the_job_keeps(toy_stage, corpus, tmp_path):
    work = tmp_path / "work"
    train_tokenizer.main(["--input", str(corpus / "*.jsonl.zst"), "--work_dir", str(work), "--sample_only",
                          "--weights", "natural", "--filters", "toy", *FAST_BEAM])
    texts = [json.loads(line)["text"] for line in (work / "sample.jsonl").read_text().splitlines()]
    expected = sorted(v[0][4:] if k in CUT else v[0] for k, v in DOCS.items()
                      if v and v[0].strip() and k not in REMOVED)
    assert sorted(texts) == expected
    stats = json.loads((work / "sample_stats.json").read_text())
    assert stats["subsets"]["Github"]["filtered"] == {"toy": len([k for k in REMOVED if k[0] == 1])}
    assert stats["config"]["filters"] == ["toy"]


def test_id_key_puts_the_document_s_id_in_its_records(toy_stage, tiny_model, tmp_path):
    lines = [json.dumps({"text": "a banana here", "meta": {"pile_set_name": "ArXiv", "id": "doc-1"}}).encode(),
             json.dumps({"text": 5, "meta": {"pile_set_name": "ArXiv", "id": 2}}).encode(),
             json.dumps({"text": "kept text", "meta": {"pile_set_name": "ArXiv", "id": "doc-3"}}).encode(),
             json.dumps({"text": "no id banana", "meta": {"pile_set_name": "ArXiv"}}).encode()]
    write_lines(str(tmp_path / "in" / "a.jsonl"), lines, compression="none")
    out = tmp_path / "out"
    manifest = run.main(["--input", str(tmp_path / "in" / "a.jsonl"), "--output_dir", str(out), "--tokenizer_model",
                         tiny_model, "--seq_len", "32", "--max_dead_letter_fraction", "1", "--filters", "toy",
                         "--id_key", "meta.id"] + FAST_BEAM)
    removed = _removed(out, manifest)
    assert removed[(0, 1)][0]["id"] == "doc-1" and "id" not in removed[(0, 4)][0]
    (letter,) = [json.loads(line) for p in out.glob("run-*/dead_letters/*.jsonl")
                 for line in p.read_text().splitlines()]
    assert letter["id"] == 2 and letter["reason"] == "text_not_string"
    assert manifest["config"]["id_key"] == "meta.id"
