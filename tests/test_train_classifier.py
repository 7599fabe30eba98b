"""`pile-pipeline train-classifier`: the command's model, card, printed measures, determinism and refusals."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import train_classifier
from pipeline.stages.fasttext_file import read_header

GOOD = ["the study of science and the method of research", "a careful analysis of the data and the results"]
SPAM = ["buy cheap now click here for a free offer", "win money casino best discount sale today"]


@pytest.fixture
def sides(tmp_path):
    (tmp_path / "pos.jsonl").write_text("".join(json.dumps({"body": f"{GOOD[i % 2]} {i}"}) + "\n"
                                                for i in range(150)) + "{bad line\n")
    (tmp_path / "neg.jsonl").write_text("".join(json.dumps({"body": f"{SPAM[i % 2]} {i}"}) + "\n" for i in range(150)))
    return tmp_path


def _argv(root, *more):
    return ["--positive", str(root / "pos.jsonl"), "--negative", str(root / "neg.jsonl"), "--model",
            str(root / "m.bin"), "--text_key", "body", "--dim", "8", "--epoch", "4", *more]


def test_the_model_its_card_and_the_measures(sides, capsys):
    card = train_classifier.main(_argv(sides))
    out = capsys.readouterr().out
    assert "documents: 150 positive, 150 negative" in out and "AUC 1.0000" in out and "precision" in out
    assert card == json.loads((sides / "m.card.json").read_text())
    assert card["settings"] == {"word_ngrams": 2, "dim": 8, "epoch": 4, "lr": 0.1, "min_count": 1, "threads": 1,
                                "seed": 0}
    assert card["deterministic"] and card["labels"] == {"positive": "hq", "negative": "cc"}
    assert card["held_out"]["documents"] == sum(card["documents"]["held_out"].values()) > 0
    assert sorted(read_header(str(sides / "m.bin")).labels) == ["cc", "hq"]
    first = card["sha256"]
    again = train_classifier.main(_argv(sides, "--overwrite"))
    assert again["sha256"] == first  # one thread: the same model file


def test_refusals_are_one_line_exit_2(sides, caplog):
    assert train_classifier.cli(_argv(sides)) == 0
    assert train_classifier.cli(_argv(sides)) == 2
    assert "m.bin exists: pass --overwrite" in caplog.text
    assert train_classifier.cli(_argv(sides, "--held_out", "1.5")) == 2
    assert "--held_out" in caplog.text
    empty = sides / "empty.jsonl"
    empty.write_text(json.dumps({"body": "  "}) + "\n")
    assert train_classifier.cli(["--positive", str(empty), "--negative", str(sides / "neg.jsonl"), "--model",
                                 str(sides / "x.bin"), "--text_key", "body"]) == 2
    assert "--positive: no document with a non-empty `body`" in caplog.text
    assert train_classifier.cli(["--positive", "a", "--model", str(sides / "y.bin")]) == 2
    assert "missing required flags: --positive and --negative (or --from_output)" in caplog.text
