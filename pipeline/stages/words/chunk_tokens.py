"""spaCy's tokenizer on one chunk (a run of non-whitespace characters), in Python, in linear time.

spaCy tokenizes a chunk in three steps (spacy/tokenizer.pyx: `_split_affixes`, `_attach_tokens`,
`_apply_special_cases`). `ChunkTokens.tokens` does them step for step, with the tokenizer's own
special cases and its own compiled prefix, suffix, infix and URL patterns:

  1. the chunk is a special case: its tokens;
  2. strip a prefix and a suffix, again and again, until neither matches or what is left (or what
     the prefix or the suffix alone would leave) is a special case;
  3. what is left: a special case's tokens, one token if it is a URL, else split at its infixes;
     then the suffixes, the last stripped first;
  4. the document-wide special cases over the chunk's tokens (`special_cases.py`).

spaCy cuts a new string at every step of 2 and searches its suffix pattern over the whole string,
so a chunk of thousands of affixes (`'s's's...`, `((((...`) takes time quadratic in its length.
Here step 2 moves two indices over the chunk and asks each pattern only about the characters that
decide its answer (`spacy_patterns.AffixFacts`): a prefix the first `prefix_window` characters (or
a run of a repeated character and as many more), a suffix the last `suffix_window` (its start) and
the characters its lookbehinds see, a special case only a string no longer than the longest case.
The URL pattern's quadratic part is replaced by an equal linear one (`linear_url_match`). Every
step then costs time bounded by a constant or by the characters it strips: linear in the chunk.

spaCy's cache of chunks it has tokenized is left out: it holds only what these steps give. No Doc
is made and spaCy's vocabulary does not grow. Cases that straddle two chunks are the caller's
(spacy_words.py).
"""

from __future__ import annotations

import re

from spacy.attrs import ORTH, intify_attrs

from pipeline.stages.words.spacy_patterns import NONE, SINGLE, AffixFacts, Unsupported, linear_url_match
from pipeline.stages.words.special_cases import SpecialCases, document_cases


def _compiled(function) -> re.Pattern:
    """The compiled pattern a tokenizer's search/match/finditer belongs to."""
    pattern = getattr(function, "__self__", None)
    if not isinstance(pattern, re.Pattern):
        raise Unsupported(f"{function!r} is not a compiled pattern's method")
    return pattern


MEMO = 50_000  # answers remembered per pattern (then forgotten all at once)


def _remember(memo: dict[str, int], key: str, value: int) -> int:
    if len(key) <= 64:  # a run's prefix can be long: not kept
        if len(memo) >= MEMO:
            memo.clear()
        memo[key] = value
    return value


class ChunkTokens:
    """spaCy's tokens of one chunk, for the tokenizer given (its patterns, rules and URL match)."""

    def __init__(self, tokenizer):
        """Read the tokenizer's patterns; Unsupported when they are beyond what spacy_patterns reads."""
        if tokenizer.token_match is not None:
            raise Unsupported("a tokenizer with token_match")
        self._prefix_search = tokenizer.prefix_search
        self._suffix = _compiled(tokenizer.suffix_search)
        self._infix_match = _compiled(tokenizer.infix_finditer).match
        self._facts = AffixFacts(_compiled(tokenizer.prefix_search).pattern, self._suffix.pattern,
                                 _compiled(tokenizer.infix_finditer).pattern)
        self._url_match = linear_url_match(tokenizer.url_match)
        self.specials = {case: tuple(intify_attrs(token)[ORTH] for token in tokens)
                         for case, tokens in tokenizer.rules.items()}
        self._longest = max(map(len, self.specials), default=0)
        self.cases = SpecialCases(document_cases(tokenizer), self.specials)
        self._runs: dict[str, re.Pattern] = {}  # c -> the pattern of a run of c
        self.forget()

    def forget(self) -> None:
        """Forget the affix patterns' answers remembered (by the characters that decide them)."""
        self._prefixes: dict[str, int] = {}
        self._suffixes: dict[str, int] = {}
        self._tails: dict[str, int] = {}

    def _run_end(self, chunk: str, start: int, end: int) -> int:
        """The end of the run of chunk[start] that starts at start (at most end)."""
        char = chunk[start]
        run = self._runs.get(char)
        if run is None:
            run = self._runs[char] = re.compile(re.escape(char) + "+")
        return run.match(chunk, start, end).end()

    @staticmethod
    def _run_start(chunk: str, start: int, end: int) -> int:
        """The start of the run of chunk[end - 1] that ends at end (at least start)."""
        char = chunk[end - 1]
        i, step = end - 1, 8
        while i - step >= start and chunk[i - step:i] == char * step:  # long runs by growing steps
            i -= step
            step = min(2 * step, 4096)
        while i > start and chunk[i - 1] == char:
            i -= 1
        return i

    def _prefix_length(self, chunk: str, start: int, end: int) -> int:
        """The length of the prefix pattern's match on chunk[start:end], reading only what decides it."""
        facts = self._facts
        window = facts.prefix_reach(chunk[start])
        stop = end
        if window is not None:
            stop = start + window
            if chunk[start] in facts.prefix_runs:
                stop = self._run_end(chunk, start, end) + window
            stop = min(stop, end)
        key = chunk[start:stop]
        length = self._prefixes.get(key)
        if length is None:
            m = self._prefix_search(key)
            length = _remember(self._prefixes, key, (m.end() - m.start()) if m is not None else 0)
        return length

    def _suffix_length(self, chunk: str, start: int, end: int) -> int:
        """The length of the suffix pattern's match on chunk[start:end], reading only what decides it.

        Every suffix piece ends at the end, so the match is the leftmost start where one matches:
        a piece of bounded width that can end with the last character starts in the last `window`
        characters (its lookbehinds reading `look` more), a run of a repeated character where the
        run does.
        """
        facts = self._facts
        reach = facts.suffix_reach(chunk[end - 1])
        if reach is None or end - start <= reach[0] + reach[1]:
            key = chunk[start:end]
            length = self._suffixes.get(key)
            if length is None:
                m = self._suffix.search(key)
                length = _remember(self._suffixes, key, (m.end() - m.start()) if m is not None else 0)
            return length
        window, look = reach
        at = end
        least = facts.suffix_runs.get(chunk[end - 1])
        if least is not None:
            run = self._run_start(chunk, start, end)
            if end - run >= least:
                at = run
        # a bounded piece's match, decided by the characters it and its lookbehinds can read
        key = chunk[end - window - look:end]
        length = self._tails.get(key)
        if length is None:
            m = self._suffix.search(key, look)
            length = _remember(self._tails, key, (len(key) - m.start()) if m is not None else 0)
        return max(end - at, length)

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

    def affix_tokens(self, chunk: str) -> list[str]:
        """The chunk's tokens before the document-wide special cases (steps 1-3)."""
        specials, longest = self.specials, self._longest
        if len(chunk) <= longest:
            hit = specials.get(chunk)
            if hit is not None:
                return list(hit)
        facts = self._facts
        prefix_kinds, suffix_kinds = facts.prefix_kinds, facts.suffix_kinds
        prefixes: list[str] = []
        suffixes: list[str] = []
        start, end = 0, len(chunk)  # what is left: chunk[start:end]
        last = -1
        while start < end and end - start != last:
            size = last = end - start
            if size <= longest and chunk[start:end] in specials:
                break
            kind = prefix_kinds.get(chunk[start])
            if kind is None:
                kind = facts.prefix_kind(chunk[start])
            pre = 0 if kind == NONE else 1 if kind == SINGLE else self._prefix_length(chunk, start, end)
            if pre and pre < size and size - pre <= longest and chunk[start + pre:end] in specials:
                prefixes.append(chunk[start:start + pre])
                start += pre
                break
            suf = 0
            if pre < size:  # the suffix of what the prefix leaves
                kind = suffix_kinds.get(chunk[end - 1])
                if kind is None:
                    kind = facts.suffix_kind(chunk[end - 1])
                if kind == SINGLE:
                    suf = 1
                elif kind != NONE:
                    suf = self._suffix_length(chunk, start + pre, end)
            if suf and suf < size and size - suf <= longest and chunk[start:end - suf] in specials:
                suffixes.append(chunk[end - suf:end])
                end -= suf
                break
            if pre:
                prefixes.append(chunk[start:start + pre])
                start += pre
            if suf:
                suffixes.append(chunk[end - suf:end])
                end -= suf
        tokens = prefixes
        if start < end:
            string = chunk[start:end]
            hit = specials.get(string) if end - start <= longest else None
            tokens.extend(hit if hit is not None else self._split_infixes(string))
        if suffixes:
            tokens.extend(reversed(suffixes))
        return tokens

    def tokens(self, chunk: str) -> list[str]:
        """The tokens spaCy makes of the chunk alone (steps 1-4)."""
        tokens = self.affix_tokens(chunk)
        cases = self.cases
        return cases.apply(tokens) if cases.may_change(tokens) else tokens
