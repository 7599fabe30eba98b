"""The inspection commands' pure pieces: sampling, safe text, manifest expressions, flags, the browser requirement."""

from __future__ import annotations

import importlib

import browser
import pytest

from pipeline.cli import main as main_module
from pipeline.inspect.counts import Cell, bucket_rows, funnel, value
from pipeline.inspect.figures import _leading_number
from pipeline.inspect.page import esc, number
from pipeline.inspect.select import Selection, sample
from pipeline.inspect.text import clip, lines_cut, shown, visible


def _records(n: int) -> list[dict]:
    return [{"file_index": i % 3, "line": i, "reason": ("a", "b")[i % 2], "rule": f"r{i % 4}", "subset": "s"}
            for i in range(1, n + 1)]


def test_a_sample_does_not_depend_on_order_and_a_larger_one_holds_it():
    records = _records(200)
    small = sample(records, 5, seed=2)
    assert small == sample(list(reversed(records)), 5, seed=2) and len(small) == 5
    assert all(r in sample(records, 20, seed=2) for r in small)
    assert small != sample(records, 5, seed=3)
    assert small == sorted(small, key=lambda r: (r["file_index"], r["line"]))
    each = sample(records, 3, seed=0, per_rule=True)
    groups = {(r["reason"], r["rule"]) for r in records}
    assert {(r["reason"], r["rule"]) for r in each} == groups and len(each) == 3 * len(groups)


def test_a_selection_matches_reason_rule_and_subset():
    record = {"file_index": 0, "line": 1, "reason": "dup", "subset": "x"}  # dedup's records have no rule
    assert Selection().matches(record) and Selection(reasons=frozenset({"dup"})).matches(record)
    assert not Selection(rules=frozenset({"r"})).matches(record)
    assert not Selection(subsets=frozenset({"y"})).matches(record)


def test_text_is_cut_first_and_its_controls_made_visible():
    hostile = "a\x1b[2J\u202eb\x00\n\tc" + "x" * 10_000_000
    out = shown(hostile, 12)
    assert out == "a\\x1b[2J\\u202eb\\x00\n\tcx… [9,999,999 more characters]"
    assert visible("\x85\u2028") == "\\x85\\u2028" and clip("abc", 0) == "abc"
    assert esc("</script>\x07", 100) == "&lt;/script&gt;\\x07"
    assert lines_cut("keep\ngone\n  keep2 \nchanged", "keep\nkeep2\nchanged!") == ["gone", "changed"]


def test_manifest_expressions_and_number_cells():
    manifest = {"totals": {"lines": 10, "documents_kept": 6}, "dead_letters": {"records": 1},
                "subsets": {"a.b": {"filtered": {"empty_text": 1}, "tokens": 5},
                            "c": {"filtered": {"empty_text": 1}, "tokens": 7}},
                "removed": {"by_reason": {"gopher_quality": 1}, "tokens_by_reason": {"gopher_quality": 3}},
                "config": {"filters": ["gopher_quality"]}}
    assert value(manifest, [[1, ["subsets", None, "filtered", "empty_text"]]]) == 2
    assert value(manifest, [[1, ["subsets", "a.b", "tokens"]], [-1, ["nothing", "here"]]]) == 5
    rows = funnel(manifest)
    assert [r.step for r in rows] == ["input lines", "dead letters", "empty_text", "gopher_quality", "kept"]
    assert [r.left.value for r in rows] == [10, 9, 7, 6, 6] and rows[-1].tokens.value == 12
    cell = number(Cell(1234, m=((1, ("totals", "lines")),)), 1)
    assert cell == ('<td class="n" data-src="{&quot;run&quot;:1,&quot;m&quot;:[[1,[&quot;totals&quot;,&quot;lines'
                    '&quot;]]]}">1,234</td>')
    assert number(None) == '<td class="na">—</td>'
    record = {"buckets": [{"value": "0", "directory": "k=0", "documents": 4, "tokens": 9, "manifest": None},
                          {"value": "1", "directory": "k=1", "documents": 2, "tokens": 5, "manifest": "k=1/m",
                           "records": 3, "label_tokens": 5}]}
    assert value(record, [[1, ["buckets", 1, "documents"]], [1, ["buckets", 5, "documents"]]]) == 2
    rows = bucket_rows(record)
    assert [[c.value if c else None for c in r.cells] for r in rows] == [[4, 9, None, None], [2, 5, 3, 5]]
    assert rows[1].cells[2].m == ((1, ("buckets", 1, "records")),)


@pytest.mark.parametrize("command", ["removed", "report"])
def test_every_flag_has_a_text_and_its_default(command):
    parser = importlib.import_module(main_module.COMMANDS[command][0]).build_parser()
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert "default:" in (action.help or ""), action.option_strings


def test_a_missing_browser_fails_where_scripts_test_sh_requires_one(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PILE_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="NOT checked in a browser"):
        browser.chromium()
    monkeypatch.delenv("PILE_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match="NOT checked in a browser"):
        browser.chromium()


def test_score_buckets_are_drawn_in_order_of_their_numbers():
    assert [_leading_number(k) for k in ("0.8-0.9", ".5", "1e-3", "en", 3)] == [0.8, 0.5, 0.001, None, 3.0]
