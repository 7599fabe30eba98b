"""spaCy's tokenizer on one chunk (a run of non-whitespace characters), in Python, without a Doc.

spaCy tokenizes a chunk in three steps (spacy/tokenizer.pyx: `_split_affixes`, `_attach_tokens`,
`_apply_special_cases`). `ChunkTokens.tokens` does the first two step for step, with the
tokenizer's own special cases and its own compiled prefix, suffix, infix and URL patterns:

  1. the chunk is a special case: its tokens;
  2. strip a prefix and a suffix, again and again, until neither matches or what is left (or what
     the prefix or the suffix alone would leave) is a special case;
  3. what is left: a special case's tokens, one token if it is a URL, else split at its infixes;
     then the suffixes, the last stripped first.

spaCy's cache of chunks it has tokenized is left out: it holds only what these steps give. The
speed comes from asking a pattern only when it could match: `spacy_patterns.AffixFacts` tells,
from the character that decides (a string's first for a prefix, its last for a suffix), when no
piece can match and when the match is that one character (`,` `)` `"`), and whether a string
holds a character an infix can start with; a suffix is searched in the last characters only.
No Doc is made and spaCy's vocabulary does not grow.

Step 3 of spaCy (the special cases its matcher finds over the tokens of the whole text: `:)`,
`'s` after a split ...) is not done: when the chunk's tokens hold all of such a case's tokens in a
row (`cases`), `tokens` returns None and the caller asks spaCy. Cases that straddle two chunks
are the caller's (words.py).
"""

from __future__ import annotations

from spacy.attrs import ORTH, intify_attrs

from pipeline.stages.words.spacy_patterns import NONE, SINGLE, AffixFacts, Unsupported


def _pattern(function) -> str:
    """The text of the compiled pattern a tokenizer's search/match/finditer belongs to."""
    text = getattr(getattr(function, "__self__", None), "pattern", None)
    if not isinstance(text, str):
        raise Unsupported(f"{function!r} is not a compiled pattern's method")
    return text


def document_cases(tokenizer) -> dict[str, tuple[str, ...]]:
    """The special cases spaCy's matcher finds over a whole text: case -> the tokens it looks for.

    spaCy adds a case to that matcher when its affixes would split it (or it holds a space), with
    the case's tokens without special cases (spacy/tokenizer.pyx, `add_special_case`).
    """
    from spacy.tokenizer import Tokenizer

    tok = tokenizer
    bare = Tokenizer(tok.vocab, rules={}, prefix_search=tok.prefix_search, suffix_search=tok.suffix_search,
                     infix_finditer=tok.infix_finditer, token_match=tok.token_match, url_match=tok.url_match)
    return {case: tuple(t.text for t in bare(case)) for case in tok.rules
            if not tok.faster_heuristics or tok.find_prefix(case) or tok.find_infix(case)
            or tok.find_suffix(case) or " " in case}


class ChunkTokens:
    """spaCy's tokens of one chunk, for the tokenizer given (its patterns, rules and URL match)."""

    def __init__(self, tokenizer):
        """Read the tokenizer's patterns; Unsupported when they are beyond what spacy_patterns reads."""
        if tokenizer.token_match is not None:
            raise Unsupported("a tokenizer with token_match")
        self._prefix_search = tokenizer.prefix_search
        self._suffix = getattr(tokenizer.suffix_search, "__self__", None)
        self._infix_match = tokenizer.infix_finditer.__self__.match
        self._facts = AffixFacts(_pattern(tokenizer.prefix_search), _pattern(tokenizer.suffix_search),
                                 _pattern(tokenizer.infix_finditer))
        self._url_match = tokenizer.url_match or (lambda _: None)
        self.specials = {case: tuple(intify_attrs(token)[ORTH] for token in tokens)
                         for case, tokens in tokenizer.rules.items()}
        self.cases = document_cases(tokenizer)
        # the first two tokens -> the token runs of the cases that would change the tokens; the
        # runs of one token (a case holding a space) apart
        self._runs: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        self._single_runs = set()
        for case, pieces in self.cases.items():
            if pieces == self.specials[case]:
                continue
            if len(pieces) == 1:
                self._single_runs.add(pieces[0])
            else:
                self._runs.setdefault(pieces[:2], []).append(pieces)

    def _suffix_length(self, string: str) -> int:
        """The length of the suffix pattern's leftmost match (0: none)."""
        facts = self._facts
        start = max(0, len(string) - facts.suffix_window)
        if facts.unbounded_last is not None and facts.unbounded_last.fullmatch(string[-1]):
            start = 0
        m = self._suffix.search(string, start)
        return (m.end() - m.start()) if m is not None else 0

    def _split_infixes(self, string: str) -> list[str]:
        """What the affixes left, as spaCy's `_attach_tokens` splits it: one token if a URL, else at its infixes.

        An infix at the very start does not split (spaCy skips it); the URL pattern matters only
        when an infix would split, so it is asked last.
        """
        chars = set(string)
        facts = self._facts
        if not chars <= facts.known_chars:
            facts.learn_chars(chars)
        starts = facts.infix_chars.intersection(chars)
        if not starts:
            return [string]
        # finditer's matches, tried only where an infix can start (at such a character; lookbehinds
        # still see what is before it): the leftmost match from where the last one ended, no overlap
        candidates = []
        for char in starts:
            i = string.find(char)
            while i >= 0:
                candidates.append(i)
                i = string.find(char, i + 1)
        if len(starts) > 1:
            candidates.sort()
        matches = []
        match = self._infix_match
        end = 0
        for i in candidates:
            if i >= end:
                m = match(string, i)
                if m is not None:
                    end = m.end()
                    if i:  # spaCy skips an infix at the very start
                        matches.append((i, end))
        if not matches or self._url_match(string):
            return [string]
        tokens = []
        start = 0
        for at, end in matches:
            if at != start:
                tokens.append(string[start:at])
            if at != end:
                tokens.append(string[at:end])
            start = end
        if start < len(string):
            tokens.append(string[start:])
        return tokens

    def tokens(self, chunk: str) -> list[str] | None:
        """The tokens spaCy makes of the chunk alone, or None where a case of its matcher may apply."""
        specials = self.specials
        hit = specials.get(chunk)
        if hit is not None:
            return list(hit)
        facts = self._facts
        prefix_kinds, suffix_kinds = facts.prefix_kinds, facts.suffix_kinds
        prefixes: list[str] = []
        suffixes: list[str] = []
        string = chunk
        last = 0
        while string and len(string) != last:
            if string in specials:
                break
            last = len(string)
            kind = prefix_kinds.get(string[0])
            if kind is None:
                kind = facts.prefix_kind(string[0])
            if kind == NONE:
                pre = 0
            elif kind == SINGLE:
                pre = 1
            else:
                m = self._prefix_search(string)
                pre = (m.end() - m.start()) if m is not None else 0
            if pre:
                prefix = string[:pre]
                minus_pre = string[pre:]
                if minus_pre and minus_pre in specials:
                    string = minus_pre
                    prefixes.append(prefix)
                    break
                rest = minus_pre  # the suffix is searched after the prefix
            else:
                rest = string
            suf = 0
            if rest:
                kind = suffix_kinds.get(rest[-1])
                if kind is None:
                    kind = facts.suffix_kind(rest[-1])
                if kind == SINGLE:
                    suf = 1
                elif kind != NONE:
                    suf = self._suffix_length(rest)
            if suf:
                suffix = string[-suf:]
                minus_suf = string[:-suf]
                if minus_suf and minus_suf in specials:
                    string = minus_suf
                    suffixes.append(suffix)
                    break
                if pre and pre + suf > len(string):  # they overlap: the prefix alone
                    string = minus_pre
                    prefixes.append(prefix)
                    continue
                string = string[pre:-suf]
                if pre:
                    prefixes.append(prefix)
                suffixes.append(suffix)
            elif pre:
                string = minus_pre
                prefixes.append(prefix)
        tokens = prefixes
        if string:
            hit = specials.get(string)
            if hit is not None:
                tokens.extend(hit)
            else:
                tokens.extend(self._split_infixes(string))
        if suffixes:
            tokens.extend(reversed(suffixes))
        runs = self._runs
        if len(tokens) > 1 and not runs.keys().isdisjoint(zip(tokens, tokens[1:], strict=False)):
            for i, pair in enumerate(zip(tokens, tokens[1:], strict=False)):
                for pieces in runs.get(pair, ()):
                    if tuple(tokens[i:i + len(pieces)]) == pieces:
                        return None
        if self._single_runs and not self._single_runs.isdisjoint(tokens):
            return None
        return tokens
