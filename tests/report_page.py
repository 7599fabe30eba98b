"""The report's page parsed, and each of its numbers evaluated against the manifests, with this file's own code.

Every number cell of the page (`<td class="n">`) names its source in `data-src` (pipeline/inspect/page.py);
`evaluate` computes it here, independently of the report's code: a manifest expression walked over the
manifest (a --split_by output's: buckets.json), a count of removed/ records, two runs' documents by fate,
or a difference.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser

import pytest

from pipeline.cli import report as report_cli


class Page(HTMLParser):
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
    if isinstance(obj, list):  # buckets.json's buckets, by index
        return _leaves(obj[path[0]], path[1:]) if isinstance(path[0], int) and 0 <= path[0] < len(obj) else []
    if not isinstance(obj, dict):
        return []
    keys = sorted(obj) if path[0] is None else [path[0]] if path[0] in obj else []
    return [leaf for key in keys for leaf in _leaves(obj[key], path[1:])]


def records(out, manifest) -> list[dict]:
    """Every record of an output's removed/ files."""
    return [json.loads(line) for entry in (manifest.get("removed") or {}).get("files", [])
            for line in (out / entry["path"]).read_text().splitlines()]


def _fates(outputs) -> Counter:
    """(fate in the first run, fate in the second) -> documents, where they differ; a fate: [reason, rule] or None."""
    removals = []
    for out, manifest in outputs:
        cuts = set((manifest.get("removed") or {}).get("cut_by_reason", {}))
        removals.append({(r["file_index"], r["line"]): [r["reason"], r.get("rule", "")]
                         for r in records(out, manifest) if r["reason"] not in cuts})
    found = Counter()
    for key in set(removals[0]) | set(removals[1]):
        a, b = removals[0].get(key), removals[1].get(key)
        if a != b:
            found[json.dumps([a, b])] += 1
    return found


def evaluate(src, outputs) -> float:
    """The number a cell's source names, computed from the outputs ([(directory, manifest)]) alone."""
    if "delta" in src:
        return evaluate(src["delta"][1], outputs) - evaluate(src["delta"][0], outputs)
    if "f" in src:
        return _fates(outputs)[json.dumps([src["f"]["a"], src["f"]["b"]])]
    out, manifest = outputs[src["run"]]
    if "m" in src:
        return sum(sign * sum(_leaves(manifest, path)) for sign, path in src["m"])
    wanted = src["r"]
    return sum(1 for r in records(out, manifest) if all(r.get(k, "") == v for k, v in wanted.items()))


def render(argv, capsys, tmp_path) -> tuple[Page, str]:
    """`pile-pipeline report ARGV --html tmp_path/page.html`: the page parsed, and its text."""
    html = tmp_path / "page.html"
    assert report_cli.cli([*map(str, argv), "--html", str(html)]) == 0, capsys.readouterr().err
    text = html.read_text()
    parser = Page()
    parser.feed(text)
    return parser, text


def number(text: str) -> float:
    """A number as the page prints it (1,234; +5)."""
    return float(text.replace(",", "").replace("+", ""))


def check_numbers(page: Page, outputs, least: int = 50) -> None:
    """Every number cell equals what its source names; the page has at least `least` of them."""
    assert len(page.cells) >= least
    for src, text in page.cells:
        assert number(text) == pytest.approx(evaluate(src, outputs), rel=1e-5), (src, text)


def check_self_contained(page: Page, text: str) -> None:
    """No script, link or frame; only inline images and anchors; nothing fetched by the styles; a CSP."""
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert all(u.startswith(("data:image/png;base64,", "#")) for u in page.urls), page.urls
    assert not re.search(r"https?://|url\(|@import", text.split("<style>")[1].split("</style>")[0])
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
