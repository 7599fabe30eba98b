"""Texts that made a stage take time quadratic in their length: the one list the tests draw from.

Each shape is a unit repeated to the size asked (`shape_text`): one character or a pair, the
affixes and special cases of spaCy's tokenizer (`'s`, `(`, `:)`), what its URL pattern backtracks
on (`http://` then `a:`...), what datatrove's e-mail pattern backtracks on (`x@ ` then `a-`...,
`b.`... `b@` then `a`...), and runs of lines, paragraphs and sentences for the line and n-gram rules.
"""

from __future__ import annotations

_UNITS = ("'s", "'", "(", ")", "a:", "-", ".", "@", "a-", ":)", "x.", '"', "a@", "b.", "a.", "[1", "#", "...", "…",
          "''", "(:", ":-)", "e.g.", "U.S.", "'em", "n't", "1.", "1.1.", "a.b@", "é", "中", "\U0001f600", "\u00a0",
          "- a\n", "a\n", "a a\n\n", "\n", " ", "a ", ": x. ", "x. :x ", "lorem ipsum dolor. ", "{", "[edit]")

# name -> its parts: (text, share of the size it is repeated to fill; 0: once)
SHAPES: dict[str, tuple[tuple[str, float], ...]] = {
    **{repr(unit): ((unit, 1.0),) for unit in _UNITS},
    "http:// a:": (("http://", 0), ("a:", 1.0)),
    "x@ a-": (("x@ ", 0), ("a-", 1.0)),
    "b. b@ a": (("b.", 0.5), ("b@", 0), ("a", 0.5)),
    "a@[1.1.1. a": (("a@[1.1.1.", 0), ("a", 1.0)),
    "a.a. a-": (("a@", 0), ("a.", 0.5), ("a-", 0.5)),
}


def shape_text(name: str, size: int) -> str:
    """The shape's text, of about `size` characters."""
    return "".join(text * max(1, int(size * share) // len(text)) if share else text for text, share in SHAPES[name])
