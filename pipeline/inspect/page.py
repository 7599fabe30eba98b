"""The report's HTML: one self-contained page, every text escaped, every number tagged with its source.

Self-contained: styles inline, figures as `data:` PNGs, no script, no link, no font or request of
any kind; its Content-Security-Policy forbids every fetch but `data:` images and every script, so a
text that escaping missed still could not run or call out. Every text from the data (document texts,
subset and rule names, record fields, paths) goes through `esc`: cut to a length, control characters
made visible, then `html.escape`. Every number is a `<td class="n">` whose `data-src` names where it
comes from (pipeline/inspect/counts.py): `{"run": i, "m": expression}`, `{"run": i, "r": records}`,
`{"f": fates}` (two runs' documents by fate) or `{"delta": [a, b]}` (b minus a), so that a test can
check each against the manifests and removed/ files.
"""

from __future__ import annotations

import base64
import html
import json

from pipeline.inspect.counts import Cell
from pipeline.inspect.text import shown

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
NAME_CHARS = 200

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{padding:.15em .6em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}td.na{color:#999}
th{background:#f4f4f4}figure{margin:.5em 0 1.5em}img{max-width:100%;height:auto;border:1px solid #eee}
pre.doc{white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f8f8;border-left:3px solid #ccc;padding:.5em;
max-height:24em;overflow:auto;font-size:12px}.note{color:#666}.grid{display:flex;flex-wrap:wrap;gap:1em}
.grid figure{margin:0}code{background:#f4f4f4;padding:0 .2em}
"""


def esc(text, chars: int = NAME_CHARS) -> str:
    """Any text from the data, safe in HTML text or a quoted attribute: cut, controls visible, escaped."""
    return html.escape(shown(str(text), chars), quote=True)


def _format(value) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.6g}"
    return f"{int(value):,}"


def source(cell: Cell, run: int) -> dict:
    """The cell's source as the page records it."""
    if cell.f is not None:
        return {"f": cell.f}
    return {"run": run, "m": cell.m} if cell.m is not None else {"run": run, "r": cell.r}


def number(cell: Cell | None, run: int = 0) -> str:
    """A number's cell, with its source; an em dash (no number) for a count the run does not have."""
    if cell is None or cell.value is None:
        return '<td class="na">—</td>'
    src = html.escape(json.dumps(source(cell, run), ensure_ascii=True, separators=(",", ":")), quote=True)
    return f'<td class="n" data-src="{src}">{_format(cell.value)}</td>'


def delta(a: Cell | None, b: Cell | None) -> str:
    """The second run's number minus the first's, with both sources (run 0 and run 1)."""
    if a is None or b is None or a.value is None or b.value is None:
        return '<td class="na">—</td>'
    diff = b.value - a.value
    src = html.escape(json.dumps({"delta": [source(a, 0), source(b, 1)]}, ensure_ascii=True,
                                 separators=(",", ":")), quote=True)
    return f'<td class="n" data-src="{src}">{"+" if diff > 0 else ""}{_format(diff)}</td>'


def text_cell(text, chars: int = NAME_CHARS) -> str:
    """A cell of text from the data."""
    return f"<td>{esc(text, chars)}</td>"


def table(header: list[str], rows: list[str], caption: str = "") -> str:
    """A table: `header` is our own words (escaped too), `rows` are rows of cells made here."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(f"<tr>{row}</tr>" for row in rows)
    cap = f"<caption class='note'>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: bytes | None, alt: str, caption: str = "") -> str:
    """A figure as an inline PNG (nothing when there is none), with a caption of ours (escaped all the same)."""
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    cap = f'<figcaption class="note">{esc(caption, 400)}</figcaption>' if caption else ""
    return f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">{cap}</figure>'


def note(text: str) -> str:
    """A sentence of ours (escaped all the same)."""
    return f'<p class="note">{html.escape(text)}</p>'


def document(text: str, chars: int) -> str:
    """A document's text: cut to `chars`, controls visible, escaped, in a scrolling block."""
    return f'<pre class="doc">{esc(text, chars)}</pre>'


def page(title: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: sections are (anchor, title, body), the anchors and titles our own words."""
    contents = "".join(f'<li><a href="#{html.escape(a)}">{html.escape(t)}</a></li>' for a, t, _ in sections)
    body = "".join(f'<section id="{html.escape(a)}"><h2>{html.escape(t)}</h2>{b}</section>' for a, t, b in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1><nav><ul>{contents}</ul></nav>{body}</body></html>\n")
