"""The tokenizer report: per-subset tokens/byte, unk and byte-fallback rates, as a table, JSON and PNG."""

from __future__ import annotations

import json
import os
import random

import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from sample_corpus import compose_lines

from pipeline.config import tokenizer as tconfig
from pipeline.core import subsets
from pipeline.tokenize import report
from pipeline.tokenize import trainer as ttrainer

RARE = "龘齉"  # two CJK characters the training text never holds: 3 UTF-8 bytes each


def train_tiny(prefix, **overrides) -> str:
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(8), 150)]
    ttrainer.write_trainer_input((("Pile-CC", t) for t in texts), prefix + ".txt", 4192)
    config = tconfig.TrainerConfig(**{"vocab_size": 450, "num_threads": 1, **overrides})
    with open(prefix + ".model", "wb") as f:
        f.write(ttrainer.train_model(prefix + ".txt", config))
    return prefix + ".model"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "llama": train_tiny(str(root / "llama")),
        # Without byte fallback, uncovered characters become <unk>.
        "nofallback": train_tiny(str(root / "nofallback"), byte_fallback=False, vocab_size=300,
                                 character_coverage=0.9995),
    }


def test_measure_counts_bytes_tokens_and_byte_fallback(models):
    sp = spm.SentencePieceProcessor(model_file=models["llama"])
    docs = [("Github", "def f(x):\n    return x"), ("Github", RARE), ("Wikipedia (en)", "the data model")]
    counts = report.measure(models["llama"], docs)
    github = counts["Github"]
    assert github.documents == 2
    assert github.bytes == len(b"def f(x):\n    return x") + 6
    assert github.tokens == len(sp.encode(docs[0][1])) + len(sp.encode(RARE))
    rare_bytes = sum(sp.is_byte(i) for i in sp.encode(RARE))
    assert rare_bytes == 6  # each uncovered character becomes its 3 UTF-8 bytes
    assert github.byte_pieces == rare_bytes + sum(sp.is_byte(i) for i in sp.encode(docs[0][1]))
    assert sp.piece_to_id("<0x0A>") in sp.encode(docs[0][1])  # the newline, through byte fallback
    assert github.unk == 0
    wiki = counts["Wikipedia (en)"].metrics()
    assert wiki["tokens_per_byte"] == pytest.approx(len(sp.encode("the data model")) / 14)
    assert wiki["bytes_per_token"] == pytest.approx(14 / len(sp.encode("the data model")))


def test_without_byte_fallback_rare_characters_are_unknown(models):
    counts = report.measure(models["nofallback"], [("Github", f"x {RARE} y")])
    assert counts["Github"].byte_pieces == 0
    assert counts["Github"].unk >= 1
    assert counts["Github"].metrics()["unk_rate"] > 0


def test_summary_rows():
    counts = {
        "Github": report.Counts(documents=2, bytes=1000, tokens=400, unk=0, byte_pieces=40),
        "Pile-CC": report.Counts(documents=3, bytes=3000, tokens=600, unk=6, byte_pieces=0),
    }
    rows = report.summarize(counts)
    assert list(rows) == ["Github", "Pile-CC", report.ALL_ROW, report.MIX_ROW]  # by name
    assert rows["Github"]["bytes_per_token"] == pytest.approx(1000 / 400)
    assert rows[report.ALL_ROW]["tokens_per_byte"] == pytest.approx(1000 / 4000)
    assert rows[report.ALL_ROW]["byte_fallback_rate"] == pytest.approx(40 / 1000)
    weights = subsets.pile_mix_weights()
    w_gh = weights["Github"] / (weights["Github"] + weights["Pile-CC"])
    mix = rows[report.MIX_ROW]
    assert mix["weights"]["Github"] == pytest.approx(w_gh, abs=1e-6)
    assert mix["tokens_per_byte"] == pytest.approx(w_gh * 0.4 + (1 - w_gh) * 0.2)
    assert mix["byte_fallback_rate"] == pytest.approx(w_gh * 0.04 / mix["tokens_per_byte"])
    assert mix["unk_rate"] == pytest.approx((1 - w_gh) * 0.002 / mix["tokens_per_byte"])


def test_model_labels():
    assert report.model_labels(["a/x.model", "b/y.model"]) == ["x", "y"]
    assert report.model_labels(["a/x.model", "b/x.model"]) == ["a/x", "b/x"]
    assert report.model_labels(["a/x.model"], ["mine"]) == ["mine"]
    with pytest.raises(ValueError, match="--label"):
        report.model_labels(["a/x.model", "b/y.model"], ["one"])


@pytest.mark.slow
def test_report_command_writes_table_json_and_png(models, tmp_path, capsys):
    from pipeline.cli import tokenizer_report as report_cli

    rng = random.Random(30)
    write_lines(str(tmp_path / "in" / "val.jsonl.zst"),
                compose_lines(rng, 120) + [b"{broken", pile_line(f"rare {RARE} text", "EuroParl")])
    args = ["--input", str(tmp_path / "in" / "*.jsonl.zst"), "--tokenizer_model", models["llama"],
            "--tokenizer_model", models["nofallback"], "--out", str(tmp_path / "report.png"),
            "--json", str(tmp_path / "report.json"), "--sample_mb_per_subset", "0.01",
            "--work_dir", str(tmp_path / "work"), *FAST_BEAM]
    result = report_cli.main(args)
    table = capsys.readouterr().out
    assert "llama tok/B" in table and "nofallback tok/B" in table
    assert "llama B/tok" in table and "nofallback bytefb%" in table and "llama unk%" in table
    assert f"chart: {tmp_path / 'report.png'}\n" in table and f"numbers: {tmp_path / 'report.json'}\n" in table
    subset_rows = [line.split("  ")[0] for line in table.splitlines()[2:] if line and not line.startswith("-")]
    named = subset_rows[:subset_rows.index(report.ALL_ROW)]
    assert named == sorted(named, key=str.casefold) and len(named) > 3
    assert report.MIX_ROW in table and "Github" in table and "bad lines skipped: 1" in table
    with open(tmp_path / "report.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert saved == json.loads(json.dumps(result))
    assert set(saved["results"]) == {"llama", "nofallback"}
    llama, nofallback = saved["results"]["llama"], saved["results"]["nofallback"]
    assert llama["EuroParl"]["unk_rate"] == 0 and llama["EuroParl"]["byte_fallback_rate"] > 0
    assert nofallback["EuroParl"]["byte_fallback_rate"] == 0
    assert saved["sample"]["config"]["weights"] == "uniform" and saved["sample"]["config"]["seed"] == 1
    with open(tmp_path / "report.png", "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    # The same sample measured again gives the same numbers.
    again = report_cli.main(["--from_sample", str(tmp_path / "work"), "--tokenizer_model", models["llama"],
                         "--out", str(tmp_path / "again.png")])
    assert again["results"]["llama"] == result["results"]["llama"]
    assert os.path.exists(tmp_path / "again.png")


def test_a_broken_model_fails_before_sampling(tmp_path):
    from pipeline.cli import tokenizer_report as report_cli

    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="bad.model: not a tokenizer file of a known kind"):
        report_cli.main(["--input", str(tmp_path / "nothing-*.zst"), "--tokenizer_model", str(tmp_path / "bad.model"),
                     "--out", str(tmp_path / "x.png"), *FAST_BEAM])


def _results(unk: float, fallback: float) -> dict:
    row = {"documents": 12, "bytes": 34_000, "tokens_per_byte": 0.3, "bytes_per_token": 1 / 0.3,
           "byte_fallback_rate": fallback, "unk_rate": unk}
    return {"m": {"Github": row, "EuroParl": {**row, "documents": 3, "bytes": 1_200},
                  report.MIX_ROW: {"tokens_per_byte": 0.3, "bytes_per_token": 1 / 0.3, "byte_fallback_rate": fallback,
                                   "unk_rate": unk}}}


def test_the_chart_drops_panels_that_are_all_zero_and_labels_each_sample_size(tmp_path):
    assert [p[0] for p in report.chart_panels(_results(unk=0.0, fallback=0.01))] == [
        "bytes_per_token", "byte_fallback_rate"]
    assert [p[0] for p in report.chart_panels(_results(unk=0.002, fallback=0.0))] == ["bytes_per_token", "unk_rate"]
    assert report.row_labels(_results(0, 0)) == ["Github  (n=12, 34.0 kB)", "EuroParl  (n=3, 1.2 kB)", report.MIX_ROW]
    drawn = report.plot(_results(unk=0.0, fallback=0.0), str(tmp_path / "one.png"), "title")
    assert drawn == {"bytes_per_token": [" 3.33"] * 3}
    assert (tmp_path / "one.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_bar_of_every_panel_carries_its_value(tmp_path):
    drawn = report.plot(_results(unk=0.002, fallback=0.01), str(tmp_path / "all.png"), "title")
    assert drawn == {"bytes_per_token": [" 3.33"] * 3, "byte_fallback_rate": [" 1.000%"] * 3,
                     "unk_rate": [" 0.200%"] * 3}
