"""Hostile text in removed documents: shown escaped and cut short, never run, by `removed` and `report`.

The job removes documents of HTML and `</script>`, terminal escapes, a bidi override, NULs and a
10 MB line (tests/inspect_corpus.py `write_hostile`). `removed` prints them with every control
character made visible (JSON keeps them whole, escaped by JSON); the report holds them escaped and
cut to --chars, stays small, and in a real Chromium runs nothing: no script element, its title its
own, no console error, the texts shown as text (tests/browser.py; a screenshot is kept).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import browser
import inspect_corpus
import pytest
from corpus_helpers import FAST_BEAM

from pipeline.cli import removed as removed_cli
from pipeline.cli import report as report_cli
from pipeline.cli import run

pytestmark = pytest.mark.slow
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202e]")
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "nav", "ul", "li", "a",
                "section", "table", "caption", "thead", "tbody", "tr", "th", "td", "p", "pre", "figure",
                "figcaption", "img", "div", "code"}


class _Tags(HTMLParser):
    """The page's elements, any event-handler attribute, and its images' sources."""

    def __init__(self):
        super().__init__()
        self.names, self.handlers, self.images = set(), [], []

    def handle_starttag(self, tag, attrs):
        self.names.add(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        self.images += [value for name, value in attrs if tag == "img" and name == "src"]


@pytest.fixture(scope="module")
def hostile(tiny_model, tmp_path_factory):
    """(output, the documents' texts, the report page's path)."""
    root = tmp_path_factory.mktemp("hostile")
    texts = inspect_corpus.write_hostile(root)
    out = root / "out"
    run.main(["--input", str(root / "hostile.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model",
              tiny_model, "--seq_len", "64", "--filters", "c4_quality", *FAST_BEAM])
    page = root / "hostile.html"
    assert report_cli.cli([str(out), "--html", str(page), "--chars", "500"]) == 0
    return out, texts, page


def test_removed_shows_control_characters_escaped_and_json_keeps_the_text_whole(hostile, capsys):
    out, texts, _ = hostile
    assert removed_cli.cli([str(out), "--chars", "300"]) == 0
    text = capsys.readouterr().out
    assert not CONTROLS.search(text)
    assert "\\x1b[31m\\u202e\\x00" in text and "[9,999,700 more characters]" in text
    assert "<script>document.title='pwned'</script><!-- \\x07\\x1b[2J bye {" in text
    assert removed_cli.cli([str(out), "--format", "json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["text"] for s in shown] == texts[:2] and shown[0]["text_chars"] == 10_000_000


def test_the_report_holds_them_escaped_and_short(hostile):
    _, _, page = hostile
    html = page.read_text()
    assert len(html) < 2_000_000  # a 10 MB document, shown cut to --chars
    assert not re.search(r"<\s*/?\s*script|<!--", html, re.IGNORECASE)
    tags = _Tags()
    tags.feed(html)
    assert tags.names <= ALLOWED_TAGS, tags.names - ALLOWED_TAGS
    assert not tags.handlers and all(src.startswith("data:image/png;base64,") for src in tags.images)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/pre&gt;&lt;/td&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;&lt;!-- \\x07\\x1b[2J bye {" in html
    assert "\\x1b[31m\\u202e\\x00" in html and not CONTROLS.search(html)
    assert "more characters]" in html


def test_the_report_runs_nothing_in_a_real_browser(hostile):
    _, _, page = hostile
    seen = browser.open_page(page, "report-hostile.png")
    assert seen["errors"] == [] and seen["scripts"] == 0
    assert seen["title"].startswith("What the run did") and "pwned" not in seen["title"]
    assert "<script>alert(1)</script></pre></td><img src=x onerror=alert(2)>" in seen["text"]
    assert "<script>document.title='pwned'</script>" in seen["text"]
    assert seen["images"] and all(min(i["natural"]) > 0 and min(i["drawn"]) > 0 for i in seen["images"])
