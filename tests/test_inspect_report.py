"""`pile-pipeline report`: the page of a run (and of two), its numbers checked against the manifests.

The job runs the stages, exact dedup and decontamination on the inspection corpus
(tests/inspect_corpus.py), once as is and once with a lower Gopher word threshold. The page is
parsed: every number cell names its source (a manifest expression, or a count of removed/ records,
or the difference of two), and each is evaluated here, by this file's own code, against the
manifests and removed/ files; the funnel's first and last rows are the manifest's lines and kept
documents. Per-rule counts come from the manifest's `rules` (the job writes them), and from
removed/ for a manifest without them. The page is self-contained, and opens in a real Chromium
(tests/browser.py) with every figure drawn and no console error.
"""

from __future__ import annotations

import json
import re
import shutil

import browser
import inspect_corpus
import pytest
from corpus_helpers import FAST_BEAM
from report_page import check_numbers, check_self_contained, number, records, render

from pipeline.cli import report as report_cli
from pipeline.cli import run

pytestmark = pytest.mark.slow


def _job(root, out, model, *more) -> dict:
    inputs = [str(root / name) for name in inspect_corpus.FILES]
    return run.main(["--input", *inputs, "--output_dir", str(out), "--tokenizer_model", model, "--seq_len", "64",
                     "--chunk_mb", "0.004", *inspect_corpus.flags(root), *more, *FAST_BEAM])


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    """(corpus root, [(output, manifest)]): the job as is, and with --gopher_min_doc_words 5."""
    root = tmp_path_factory.mktemp("report_corpus")
    inspect_corpus.write(root)
    outs = []
    for name, more in (("a", ()), ("b", ("--gopher_min_doc_words", "5"))):
        out = tmp_path_factory.mktemp(f"report_{name}") / "out"
        outs.append((out, _job(root, out, tiny_model, *more)))
    return root, outs


def test_every_number_on_the_page_is_the_manifests(runs, capsys, tmp_path):
    _, [(out, manifest), _] = runs
    page, text = render([out], capsys, tmp_path)
    check_numbers(page, [(out, manifest)])
    check_self_contained(page, text)
    funnel = {row[0]: row[1:] for row in page.rows["funnel"] if row}
    assert number(funnel["input lines"][0]) == manifest["totals"]["lines"]
    assert number(funnel["kept"][0]) == number(funnel["kept"][2]) == manifest["totals"]["documents_kept"]
    steps = [row for row in page.rows["funnel"] if row and row[0] not in ("input lines", "kept")]
    assert number(steps[-1][3]) == manifest["totals"]["documents_kept"]  # the counts add up to what was kept
    assert [row[0] for row in steps] == ["dead letters", "gopher_quality", "c4_quality", "fineweb_quality",
                                         "language", "duplicate_exact"]
    # per-rule counts: the manifest's (the job counts every rule of every record; dedup's rule is its reason)
    counted = {(reason, rule) for block in ("rules", "cut_rules") for reason, rules in
               manifest["removed"].get(block, {}).items() for rule in rules}
    assert counted == {(r["reason"], r.get("rule", r["reason"])) for r in records(out, manifest)}
    assert not [src for src, _ in page.cells if "r" in src]
    assert any(src.get("m", [[0, []]])[0][1][:2] == ["removed", "rules"] for src, _ in page.cells)
    for alt in ("length distributions", "language_score", "duplicate_exact cluster sizes", "kept documents by language",
                "documents each rule removed or cut, per subset"):
        assert alt in text, alt
    examples = re.findall(r"<h4>(removed|cut): ([^<]*?) — ", text)
    rules = {(r["reason"], r.get("rule")) for r in records(out, manifest)}
    assert len(examples) >= len(rules) and {e[1] for e in examples} >= {"duplicate_exact / -",
                                                                       "contaminated_cut / -"}


def test_per_rule_counts_come_from_removed_where_the_manifest_has_none(runs, capsys, tmp_path):
    """An output whose manifest does not count by rule (written before it did): the counts of removed/."""
    _, [(out, manifest), _] = runs
    copy = tmp_path / "without_rules"
    shutil.copytree(out, copy)
    edited = json.loads((copy / "manifest.json").read_text())
    for where in (*edited["subsets"].values(), edited["removed"]):
        where.pop("rules", None)
        where.pop("cut_rules", None)
    (copy / "manifest.json").write_text(json.dumps(edited))
    page, _ = render([copy], capsys, tmp_path)
    check_numbers(page, [(copy, edited)])
    rule_cells = [src for src, _ in page.cells if "r" in src]
    assert {(s["r"]["reason"], s["r"]["rule"]) for s in rule_cells} == {
        (r["reason"], r.get("rule", "")) for r in records(out, manifest)}
    assert not any(src.get("m", [[0, []]])[0][1][:2] == ["removed", "rules"] for src, _ in page.cells)


def test_two_runs_side_by_side(runs, capsys, tmp_path):
    _, outputs = runs
    page, text = render([outputs[0][0], "--compare", outputs[1][0]], capsys, tmp_path)
    check_numbers(page, outputs)
    deltas = [src for src, _ in page.cells if "delta" in src]
    assert deltas and {src["delta"][0]["run"] for src in deltas} == {0}
    gopher = next(row for row in page.rows["funnel"] if row and row[0] == "gopher_quality")
    before, after, difference = map(number, gopher[1:4])
    assert after < before and difference == after - before  # a lower word threshold removes fewer
    changed = [src["f"] for src, _ in page.cells if "f" in src]  # evaluated by check_numbers above
    assert changed and all(f["a"] and f["a"][0] == "gopher_quality" for f in changed)
    assert "<h4>" in text.split('id="fates"')[1].split("</section>")[0]  # and shown
    assert "gopher_min_doc_words" in text and "differs" in text


def test_mistakes_an_input_changed_and_no_inputs(runs, capsys, tmp_path):
    root, [(out, manifest), _] = runs
    assert report_cli.cli([str(out), "--html", str(out / "r.html")]) == 2
    assert "inside the output" in capsys.readouterr().err
    plain = root / "c.jsonl"
    original = plain.read_bytes()
    try:
        plain.write_bytes(original[:-10])  # its last line cut short
        assert report_cli.cli([str(out), "--html", str(tmp_path / "r.html")]) == 2
        assert f"{plain} changed since the run" in capsys.readouterr().err
        page, text = render([out, "--no_inputs"], capsys, tmp_path)
        check_numbers(page, [(out, manifest)])
        assert "the inputs were not read" in text and "<h4>" not in text
    finally:
        plain.write_bytes(original)


def test_the_page_in_a_real_browser(runs, capsys, tmp_path):
    _, outputs = runs
    render([outputs[0][0], "--compare", outputs[1][0]], capsys, tmp_path)
    seen = browser.open_page(tmp_path / "page.html", "report-compare.png")
    assert seen["errors"] == [] and seen["scripts"] == 0
    assert len(seen["images"]) >= 8
    for image in seen["images"]:
        assert image["complete"] and min(image["natural"]) > 0 and min(image["drawn"]) > 0, image
    assert "From input to kept" in seen["text"] and seen["title"].endswith("side by side")
