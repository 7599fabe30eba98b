r"""What spaCy's affix patterns can match, read from their own text: the facts chunk_tokens.py relies on.

spaCy's tokenizer strips prefixes and suffixes and splits at infixes with three compiled regular
expressions (alternations of pieces: `^(` ... for prefixes, `...$` for suffixes). Whether a piece
can match at all is decided by the characters it consumes first (a prefix, an infix) or last (a
suffix): a prefix match consumes the string's first character first, a suffix match its last
character last, an infix match the character where it starts. So, read from the patterns' text:

  first(piece), last(piece)   the one-character atoms (a literal, a class, an escape) that can be
                              consumed first / last; lookarounds and anchors consume nothing
  single(piece)               the character, when the piece is that one literal character and nothing
                              else (no lookaround): its match is always that character

and then, for one character c:
  prefix_kind(c)  NONE: no prefix can start with c; SINGLE: every piece that can is the literal c, so
                  the prefix of a string starting with c is c; COMPLEX: ask the pattern
  suffix_kind(c)  the same for the last character of a string
  has_infix_start whether a string holds a character one of an infix piece's first atoms matches:
                  a string without one holds no infix
  suffix_window   a suffix match of a piece of bounded width starts in the string's last this many
                  characters; the pieces without a bound (unbounded_last) can match only when the
                  last character is one of theirs

The reader knows the syntax spaCy's patterns use (literals, escapes, classes, groups, lookarounds,
anchors, quantifiers). Anything else (a backreference, a flag, a piece that can match nothing and
so match empty) raises `Unsupported`, and the caller tokenizes every chunk with spaCy itself.
tests/test_stage_words.py checks these facts against Python's own parse of the patterns.
"""

from __future__ import annotations

import dataclasses
import re

NONE, SINGLE, COMPLEX = 0, 1, 2
_HEX = {"x": 2, "u": 4, "U": 8}
_CLASS_ESCAPES = "dDwWsS"
_ZERO_WIDTH_ESCAPES = "bBAZ"


class Unsupported(ValueError):
    """A pattern this reader does not understand: do without the facts."""


@dataclasses.dataclass(frozen=True)
class _Item:
    """One atom of a sequence with its quantifier. atoms: one-character regexes, or alternatives (a group)."""

    kind: str  # "char" (text is a regex matching one character), "group", "zero" (consumes nothing)
    text: str = ""
    literal: str | None = None  # the character, for a literal or an escaped one
    alternatives: tuple = ()  # for a group or a lookaround: tuples of _Item
    low: int = 1
    high: int | None = 1  # None: unbounded


class _Reader:
    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0

    def alternation(self, closing: bool) -> tuple[tuple[_Item, ...], ...]:
        alternatives = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            alternatives.append(self.sequence())
        if closing:
            if self.i >= len(self.p) or self.p[self.i] != ")":
                raise Unsupported("unbalanced group")
            self.i += 1
        elif self.i != len(self.p):
            raise Unsupported(f"unexpected {self.p[self.i]!r} at {self.i}")
        return tuple(alternatives)

    def sequence(self) -> tuple[_Item, ...]:
        items = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            item = self.atom()
            low, high = self.quantifier()
            if (low, high) != (1, 1):
                if item.kind == "zero":
                    raise Unsupported("a quantified assertion")
                item = dataclasses.replace(item, low=low, high=high, literal=None)
            items.append(item)
        return tuple(items)

    def quantifier(self) -> tuple[int, int | None]:
        p, i = self.p, self.i
        if i >= len(p):
            return 1, 1
        if p[i] in "?*+":
            low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}[p[i]]
            self.i += 1
        elif p[i] == "{":
            m = re.compile(r"\{(\d*)(,?)(\d*)\}").match(p, i)
            if not m or not (m.group(1) or m.group(3)):
                raise Unsupported("a brace that is not a repeat")  # re reads it as a literal: not ours
            low = int(m.group(1) or 0)
            high = low if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            self.i = m.end()
        else:
            return 1, 1
        if self.i < len(p) and p[self.i] in "?+":  # lazy or possessive: the same characters can match
            self.i += 1
        return low, high

    def atom(self) -> _Item:
        p, i = self.p, self.i
        ch = p[i]
        if ch == "(":
            return self.group()
        if ch == "[":
            end = self._class_end(i)
            self.i = end
            return _Item("char", p[i:end])
        if ch == "\\":
            return self.escape()
        self.i += 1
        if ch in "^$":
            return _Item("zero", ch)
        if ch == ".":
            return _Item("char", ".")
        if ch in "*+?{":
            raise Unsupported(f"nothing to repeat at {i}")
        return _Item("char", re.escape(ch), literal=ch)

    def escape(self) -> _Item:
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise Unsupported("a trailing backslash")
        ch = p[i + 1]
        if ch in _HEX:
            digits = p[i + 2:i + 2 + _HEX[ch]]
            if len(digits) != _HEX[ch] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise Unsupported(f"a bad \\{ch} escape")
            self.i = i + 2 + _HEX[ch]
            char = chr(int(digits, 16))
            return _Item("char", re.escape(char), literal=char)
        self.i = i + 2
        if ch in _CLASS_ESCAPES:
            return _Item("char", p[i:i + 2])
        if ch in _ZERO_WIDTH_ESCAPES:
            return _Item("zero", p[i:i + 2])
        if ch.isalnum() or ch == "_":
            raise Unsupported(f"the escape \\{ch}")
        return _Item("char", re.escape(ch), literal=ch)

    def _class_end(self, i: int) -> int:
        """The index after the class that starts at p[i] == "[" (as re reads it: a "]" first is literal)."""
        p = self.p
        j = i + 1
        if j < len(p) and p[j] == "^":
            j += 1
        first = True
        while j < len(p):
            if p[j] == "]" and not first:
                return j + 1
            if p[j] == "[" and j + 1 < len(p) and p[j + 1] in ":=.":
                raise Unsupported("a POSIX-like class")
            j += 2 if p[j] == "\\" else 1
            first = False
        raise Unsupported("an unterminated class")

    def group(self) -> _Item:
        p = self.p
        self.i += 1
        kind = "group"
        if p.startswith("?", self.i):
            for prefix in ("?:", "?<=", "?<!", "?=", "?!"):
                if p.startswith(prefix, self.i):
                    self.i += len(prefix)
                    kind = "group" if prefix == "?:" else "zero"
                    break
            else:
                raise Unsupported(f"the group syntax at {self.i}")
        alternatives = self.alternation(closing=True)
        if kind == "zero":
            return _Item("zero", "(lookaround)", alternatives=alternatives)
        return _Item("group", alternatives=alternatives)


def _ends(sequence: tuple[_Item, ...], last: bool) -> tuple[list[str], bool]:
    """(the one-character regexes that can be consumed first, or last; whether the sequence can match empty)."""
    out: list[str] = []
    for item in (reversed(sequence) if last else sequence):
        if item.kind == "zero":
            continue
        if item.kind == "char":
            out.append(item.text)
            nullable = False
        else:
            nullable = False
            for alternative in item.alternatives:
                ends, empty = _ends(alternative, last)
                out.extend(ends)
                nullable = nullable or empty
        if item.high == 0:
            raise Unsupported("a repeat of zero")
        if not (nullable or item.low == 0):
            return out, False
    return out, True


def _width(sequence: tuple[_Item, ...]) -> int | None:
    """The most characters the sequence can consume (None: no bound)."""
    total = 0
    for item in sequence:
        if item.kind == "zero":
            continue
        if item.kind == "char":
            each = 1
        else:
            widths = [_width(alternative) for alternative in item.alternatives]
            if None in widths:
                return None
            each = max(widths)
        if item.high is None:
            return None
        total += each * item.high
    return total


def _look(sequence: tuple[_Item, ...]) -> int | None:
    """The most characters a lookaround of the sequence (or of a group in it) can examine (None: no bound)."""
    out = 0
    for item in sequence:
        if item.kind == "char" or not item.alternatives:
            continue
        reach = []
        for alternative in item.alternatives:
            width, look = _width(alternative), _look(alternative)
            reach.append(None if width is None or look is None else
                         (max(width, look) if item.kind == "zero" else look))
        if None in reach:
            return None
        out = max(out, *reach)
    return out


def _repeat(sequence: tuple[_Item, ...]) -> tuple[str, int] | None:
    """(c, m) when the piece is one literal character c repeated at least m times, without bound (`..+`)."""
    items = [item for item in sequence if not (item.kind == "zero" and item.text in "^$")]
    if not items or any(item.kind != "char" or item.text != items[0].text for item in items):
        return None
    if all(item.high is not None for item in items):
        return None
    text = items[0].text
    char = text[1:] if text.startswith("\\") else text  # a literal's text is re.escape(c)
    if len(char) != 1 or re.escape(char) != text:
        return None
    return char, sum(item.low for item in items)


@dataclasses.dataclass(frozen=True)
class Piece:
    """One alternative of a compiled pattern: its first and last atoms, and its one literal character."""

    first: re.Pattern
    last: re.Pattern
    single: str | None
    width: int | None  # the most characters it consumes (None: no bound)
    look: int | None  # the most characters one of its lookarounds examines (None: no bound)
    repeat: tuple[str, int] | None  # (c, m): the piece is c repeated m or more times, nothing else


def pieces(pattern: str, anchor: str | None) -> tuple[Piece, ...]:
    """The alternatives of a compiled pattern's text. anchor "^" / "$": each must start / end with it."""
    out = []
    for sequence in _Reader(pattern).alternation(closing=False):
        if anchor == "^" and (not sequence or sequence[0] != _Item("zero", "^")):
            raise Unsupported("a prefix piece not anchored at the start")
        if anchor == "$" and (not sequence or sequence[-1] != _Item("zero", "$")):
            raise Unsupported("a suffix piece not anchored at the end")
        if anchor is None and any(item.kind == "zero" and item.text in "^$" for item in sequence):
            raise Unsupported("an anchored infix piece")
        first, empty = _ends(sequence, last=False)
        last, _ = _ends(sequence, last=True)
        if empty:
            raise Unsupported("a piece that can match empty")
        consuming = [item for item in sequence if item.kind != "zero"]
        single = None
        if len(consuming) == 1 and consuming[0].literal is not None and len(sequence) == 1 + (anchor is not None):
            single = consuming[0].literal
        out.append(Piece(re.compile("|".join(first)), re.compile("|".join(last)), single, _width(sequence),
                         _look(sequence), _repeat(sequence)))
    return tuple(out)


def _windows(pieces_: tuple[Piece, ...]) -> tuple[int | None, dict[str, int]]:
    """(window, runs) of a prefix or suffix pattern: how many characters decide its match.

    A piece of bounded width examines at most its width and its lookarounds' reach: `window`, the
    largest of those (None when a piece has no bound and is not a repeated character). runs: c -> m
    for the pieces that are c repeated m or more times (such a piece examines a run of c and one more).
    """
    window, runs = 0, {}
    for piece in pieces_:
        if piece.width is not None and piece.look is not None:
            window = max(window, piece.width + piece.look)
        elif piece.repeat is not None:
            char, least = piece.repeat
            runs[char] = min(runs.get(char, least), least)
        else:
            return None, {}
    return window + 1, runs


class AffixFacts:
    """For one tokenizer's prefix, suffix and infix patterns: the kinds of characters (module docstring)."""

    def __init__(self, prefix_pattern: str, suffix_pattern: str, infix_pattern: str):
        self._prefixes = pieces(prefix_pattern, "^")
        self._suffixes = pieces(suffix_pattern, "$")
        infixes = pieces(infix_pattern, None)
        self._infix_starts = re.compile("|".join(f"(?:{p.first.pattern})" for p in infixes))
        self.infix_chars: set[str] = set()  # the characters seen so far that an infix can start with
        self.known_chars: set[str] = set()  # the characters seen so far
        self.prefix_window, self.prefix_runs = _windows(self._prefixes)
        self.suffix_window, self.suffix_runs = _windows(self._suffixes)
        # the characters before a suffix's match that its lookbehinds may examine
        looks = [p.look for p in self._suffixes]
        self.suffix_look = None if None in looks else max(looks, default=0)
        if self.suffix_look is None:
            self.suffix_window = None
        if self.prefix_window is not None:
            # A run's character must start no bounded piece: a bounded prefix found inside a long
            # run would leave the run to be read again at the next step.
            for piece in self._prefixes:
                if piece.repeat is None and any(piece.first.fullmatch(c) for c in self.prefix_runs):
                    self.prefix_window = None
        self.prefix_kinds: dict[str, int] = {}
        self.suffix_kinds: dict[str, int] = {}
        self._prefix_reach: dict[str, int | None] = {}
        self._suffix_reach: dict[str, tuple[int, int] | None] = {}

    @staticmethod
    def _kind(pieces_: tuple[Piece, ...], char: str, last: bool) -> int:
        matching = [p for p in pieces_ if (p.last if last else p.first).fullmatch(char)]
        if not matching:
            return NONE
        return SINGLE if all(p.single == char for p in matching) else COMPLEX

    def learn_chars(self, chars: set[str]) -> None:
        """Sort characters not seen before into infix_chars or not (then `has_infix_start` is set algebra)."""
        for char in chars - self.known_chars:
            if self._infix_starts.fullmatch(char):
                self.infix_chars.add(char)
        self.known_chars |= chars

    def has_infix_start(self, string: str) -> bool:
        """Whether the string holds a character an infix can start with (False: it has no infix)."""
        chars = set(string)
        if not chars <= self.known_chars:
            self.learn_chars(chars)
        return not self.infix_chars.isdisjoint(chars)

    def prefix_reach(self, char: str) -> int | None:
        """How many characters decide the prefix of a string starting with `char` (None: all of them).

        The pieces that can start with it examine no more (a run of a repeated character aside).
        """
        if char not in self._prefix_reach:
            reach = _reach(self._prefixes, char, last=False)
            self._prefix_reach[char] = None if reach is None or self.prefix_window is None else sum(reach) + 1
        return self._prefix_reach[char]

    def suffix_reach(self, char: str) -> tuple[int, int] | None:
        """(window, look) of the suffix of a string ending with `char` (None: no bound).

        A bounded piece's match starts in the string's last `window` characters, and its
        lookarounds read at most `look` more.
        """
        if char not in self._suffix_reach:
            reach = _reach(self._suffixes, char, last=True)
            self._suffix_reach[char] = None if self.suffix_window is None else reach
        return self._suffix_reach[char]

    def prefix_kind(self, char: str) -> int:
        """NONE, SINGLE or COMPLEX for a string's first character (memoized per character)."""
        kind = self.prefix_kinds.get(char)
        if kind is None:
            kind = self.prefix_kinds[char] = self._kind(self._prefixes, char, last=False)
        return kind

    def suffix_kind(self, char: str) -> int:
        """NONE, SINGLE or COMPLEX for a string's last character (memoized per character)."""
        kind = self.suffix_kinds.get(char)
        if kind is None:
            kind = self.suffix_kinds[char] = self._kind(self._suffixes, char, last=True)
        return kind


# spaCy's URL pattern reads a "user:pass@" as `\S+(?::\S*)?@`, whose backtracking takes time quadratic
# in the colons of a string that is no URL. Within a chunk (no whitespace) it is the language of
# `\S+@`, which backtracks in linear time: the pattern with it matches the same strings.
_QUADRATIC_AUTH = r"(?:\S+(?::\S*)?@)?"
_LINEAR_AUTH = r"(?:\S+@)?"


def linear_url_match(url_match):
    """The tokenizer's url_match with its user:pass part made linear (the same answer on a chunk)."""
    if url_match is None:
        return lambda _string: None
    compiled = getattr(url_match, "__self__", None)
    if not isinstance(compiled, re.Pattern) or _QUADRATIC_AUTH not in compiled.pattern:
        return url_match
    return re.compile(compiled.pattern.replace(_QUADRATIC_AUTH, _LINEAR_AUTH), compiled.flags).match


def _reach(pieces_: tuple[Piece, ...], char: str, last: bool) -> tuple[int, int] | None:
    """(most characters consumed, most a lookaround examines) of the pieces that can start (end) with `char`.

    The bounded pieces; None when an unbounded one that is no repeated character can.
    """
    width = look = 0
    for piece in pieces_:
        if not (piece.last if last else piece.first).fullmatch(char):
            continue
        if piece.width is None or piece.look is None:
            if piece.repeat is None:
                return None
            continue
        width, look = max(width, piece.width), max(look, piece.look)
    return width, look
