"""The value that decided, and its threshold, as a stage records them: `removed` prints them, `report` draws them.

A stage of the test's own (registered at run time, as a user's would be) removes documents with
fewer words than `--toy_min_words`, its records carrying `words` (the value) and `threshold`. Two
runs, thresholds 30 and 45: `removed` shows each removed document with its value, which is its own
word count; decided again by the stage rebuilt from the manifest's options. The report compares the
runs: the value histograms with both thresholds drawn, and the documents whose fate changed (kept
at 30, removed at 45), counted as this file counts them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from report_page import check_numbers, render

from pipeline.cli import removed as removed_cli
from pipeline.cli import run
from pipeline.core.options import option
from pipeline.stages import registry
from pipeline.stages.base import DocumentStage, Remove

pytestmark = pytest.mark.slow
WORDS = {line: 10 + (line * 7) % 50 for line in range(1, 41)}  # words of each document: 10 to 59


@dataclasses.dataclass(frozen=True)
class ToyWordsOptions:
    toy_min_words: int = option(30, help="documents with fewer words are removed")


class ToyWords(DocumentStage):
    """Removes short documents, recording their word count and the threshold."""

    name = "toy_words"
    Options = ToyWordsOptions

    def apply(self, doc):
        words = len(doc.text.split())
        if words < self.options.toy_min_words:
            return Remove("too_few_words", {"words": words, "threshold": self.options.toy_min_words})
        return None


@pytest.fixture(scope="module")
def two_runs(tiny_model, tmp_path_factory):
    registry.register(ToyWords)
    try:
        root = tmp_path_factory.mktemp("toy_words")
        lines = [pile_line(" ".join(f"word{k}" for k in range(WORDS[line])) + ".") for line in sorted(WORDS)]
        write_lines(str(root / "docs.jsonl.zst"), lines)
        outputs = []
        for minimum in (30, 45):
            out = root / f"out{minimum}"
            manifest = run.main(["--input", str(root / "docs.jsonl.zst"), "--output_dir", str(out),
                                 "--tokenizer_model", tiny_model, "--seq_len", "32", "--filters", "toy_words",
                                 "--toy_min_words", str(minimum), *FAST_BEAM])
            outputs.append((out, manifest))
        yield outputs
    finally:
        registry.unregister("toy_words")


def test_removed_shows_the_value_that_decided(two_runs, capsys):
    (out, manifest), _ = two_runs
    assert removed_cli.cli([str(out), "--format", "json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["line"] for s in shown] == [line for line, n in WORDS.items() if n < 30]
    for item in shown:
        assert item["words"] == len(item["text"].split()) == WORDS[item["line"]] and item["threshold"] == 30
    assert removed_cli.cli([str(out), "--sample", "1"]) == 0
    assert "== removed: toy_words / too_few_words   threshold=30  words=" in capsys.readouterr().out


def test_the_report_draws_both_thresholds_and_counts_the_fates_that_changed(two_runs, capsys, tmp_path):
    (a, _), (b, _) = two_runs
    page, text = render([a, "--compare", b], capsys, tmp_path)
    check_numbers(page, two_runs, least=20)
    assert "toy_words / too_few_words: words" in text or "words of the documents toy_words" in text
    assert "thresholds drawn: 30 (A); 45 (B)" in text
    changed = [src for src, shown in page.cells if "f" in src]
    assert [(src["f"]["a"], src["f"]["b"]) for src in changed] == [(None, ["toy_words", "too_few_words"])]
    fates = {row[0]: row for row in page.rows["fates"] if row}
    assert float(fates["kept"][2]) == sum(1 for n in WORDS.values() if 30 <= n < 45)
