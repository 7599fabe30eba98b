"""`pile-pipeline report`: the page of a run (and of two), its numbers checked against the manifests.

The job runs the stages, exact dedup and decontamination on the inspection corpus
(tests/inspect_corpus.py), once as is and once with a lower Gopher word threshold. The page is
parsed: every number cell names its source (a manifest expression, or a count of removed/ records,
or the difference of two), and each is evaluated here, by this file's own code, against the
manifests and removed/ files; the funnel's first and last rows are the manifest's lines and kept
documents. Per-rule counts come from removed/ while the manifest has none, and from the manifest's
`rules` once it has them. The page is self-contained, and opens in a real Chromium
(tests/browser.py) with every figure drawn and no console error.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from html.parser import HTMLParser

import browser
import inspect_corpus
import pytest
from corpus_helpers import FAST_BEAM

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


class _Page(HTMLParser):
    """Every number cell (its text and source), each table's rows by section, and what the page refers to."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells, self.rows, self.tags, self.urls = [], {}, [], []
        self._section, self._cell, self._row = None, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href") and v]
        if tag == "section":
            self._section = attrs["id"]
        elif tag == "tr":
            self._row = []
            self.rows.setdefault(self._section, []).append(self._row)
        elif tag == "td":
            self._cell = [attrs, ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            attrs, text = self._cell
            if self._row is not None:
                self._row.append(text)
            if "n" in (attrs.get("class") or "").split():
                self.cells.append((json.loads(attrs["data-src"]), text))
            self._cell = None


def _leaves(obj, path):
    if not path:
        return [obj] if isinstance(obj, int | float) and not isinstance(obj, bool) else []
    if not isinstance(obj, dict):
        return []
    keys = sorted(obj) if path[0] is None else [path[0]] if path[0] in obj else []
    return [leaf for key in keys for leaf in _leaves(obj[key], path[1:])]


def _records(out, manifest) -> list[dict]:
    return [json.loads(line) for entry in (manifest.get("removed") or {}).get("files", [])
            for line in (out / entry["path"]).read_text().splitlines()]


def _evaluate(src, outputs) -> float:
    if "delta" in src:
        return _evaluate(src["delta"][1], outputs) - _evaluate(src["delta"][0], outputs)
    out, manifest = outputs[src["run"]]
    if "m" in src:
        return sum(sign * sum(_leaves(manifest, path)) for sign, path in src["m"])
    wanted = src["r"]
    return sum(1 for r in _records(out, manifest) if all(r.get(k, "") == v for k, v in wanted.items()))


def _page(argv, capsys, tmp_path) -> tuple[_Page, str]:
    html = tmp_path / "page.html"
    assert report_cli.cli([*map(str, argv), "--html", str(html)]) == 0, capsys.readouterr().err
    text = html.read_text()
    parser = _Page()
    parser.feed(text)
    return parser, text


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("+", ""))


def _check_numbers(page: _Page, outputs) -> None:
    assert len(page.cells) > 50
    for src, text in page.cells:
        assert _number(text) == pytest.approx(_evaluate(src, outputs), rel=1e-5), (src, text)


def _check_self_contained(page: _Page, text: str) -> None:
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert all(u.startswith(("data:image/png;base64,", "#")) for u in page.urls), page.urls
    assert not re.search(r"https?://|url\(|@import", text.split("<style>")[1].split("</style>")[0])
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


def test_every_number_on_the_page_is_the_manifests(runs, capsys, tmp_path):
    _, [(out, manifest), _] = runs
    page, text = _page([out], capsys, tmp_path)
    _check_numbers(page, [(out, manifest)])
    _check_self_contained(page, text)
    funnel = {row[0]: row[1:] for row in page.rows["funnel"] if row}
    assert _number(funnel["input lines"][0]) == manifest["totals"]["lines"]
    assert _number(funnel["kept"][0]) == _number(funnel["kept"][2]) == manifest["totals"]["documents_kept"]
    steps = [row for row in page.rows["funnel"] if row and row[0] not in ("input lines", "kept")]
    assert _number(steps[-1][3]) == manifest["totals"]["documents_kept"]  # the counts add up to what was kept
    assert [row[0] for row in steps] == ["dead letters", "gopher_quality", "c4_quality", "fineweb_quality",
                                         "language", "duplicate_exact"]
    # per-rule counts: from removed/ (this manifest has none), every rule of every record
    rule_cells = [src for src, _ in page.cells if "r" in src]
    assert {(s["r"]["reason"], s["r"]["rule"]) for s in rule_cells} == {
        (r["reason"], r.get("rule", "")) for r in _records(out, manifest)}
    for alt in ("length distributions", "language_score", "duplicate_exact cluster sizes", "kept documents by language",
                "documents each rule removed or cut, per subset"):
        assert alt in text, alt
    examples = re.findall(r"<h4>(removed|cut): ([^<]*?) — ", text)
    rules = {(r["reason"], r.get("rule")) for r in _records(out, manifest)}
    assert len(examples) >= len(rules) and {e[1] for e in examples} >= {"duplicate_exact / -",
                                                                       "contaminated_cut / -"}


def test_per_rule_counts_are_the_manifests_once_it_has_them(runs, capsys, tmp_path):
    _, [(out, manifest), _] = runs
    copy = tmp_path / "with_rules"
    shutil.copytree(out, copy)
    records = _records(out, manifest)
    edited = json.loads((copy / "manifest.json").read_text())
    cuts = set(manifest["removed"]["cut_by_reason"])
    for record in records:  # the engine's schema: counts per (reason, rule), per subset and in all
        block = "cut_rules" if record["reason"] in cuts else "rules"
        for where in (edited["subsets"][record["subset"]], edited["removed"]):
            entry = where.setdefault(block, {}).setdefault(record["reason"], {}).setdefault(
                record.get("rule", record["reason"]), {"documents": 0, **({"tokens": 0} if block == "rules" else {})})
            entry["documents"] += 1
            if block == "rules":
                entry["tokens"] += 7
    (copy / "manifest.json").write_text(json.dumps(edited))
    page, _ = _page([copy, "--no_inputs"], capsys, tmp_path)
    _check_numbers(page, [(copy, edited)])
    assert not [src for src, _ in page.cells if "r" in src]
    assert any(src.get("m", [[0, []]])[0][1][:2] == ["removed", "rules"] for src, _ in page.cells)
    assert "the manifest's per-rule counts" in html.unescape((tmp_path / "page.html").read_text())


def test_two_runs_side_by_side(runs, capsys, tmp_path):
    _, outputs = runs
    page, text = _page([outputs[0][0], "--compare", outputs[1][0]], capsys, tmp_path)
    _check_numbers(page, outputs)
    deltas = [src for src, _ in page.cells if "delta" in src]
    assert deltas and {src["delta"][0]["run"] for src in deltas} == {0}
    gopher = next(row for row in page.rows["funnel"] if row and row[0] == "gopher_quality")
    before, after, difference = map(_number, gopher[1:4])
    assert after < before and difference == after - before  # a lower word threshold removes fewer
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
        page, text = _page([out, "--no_inputs"], capsys, tmp_path)
        _check_numbers(page, [(out, manifest)])
        assert "the inputs were not read" in text and "<h4>" not in text
    finally:
        plain.write_bytes(original)


def test_the_page_in_a_real_browser(runs, capsys, tmp_path):
    _, outputs = runs
    _page([outputs[0][0], "--compare", outputs[1][0]], capsys, tmp_path)
    seen = browser.open_page(tmp_path / "page.html", "report-compare.png")
    assert seen["errors"] == [] and seen["scripts"] == 0
    assert len(seen["images"]) >= 8
    for image in seen["images"]:
        assert image["complete"] and min(image["natural"]) > 0 and min(image["drawn"]) > 0, image
    assert "From input to kept" in seen["text"] and seen["title"].endswith("side by side")
