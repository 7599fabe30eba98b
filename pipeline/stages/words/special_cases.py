"""spaCy's document-wide special cases: its phrase matcher and span filter, on a list of token texts.

After splitting each chunk on its own, spaCy's tokenizer looks over the whole text's tokens for the
special cases its affixes would split (`:)`, `'s`, `e.g.`: spacy/tokenizer.pyx,
`_apply_special_cases`), in three steps, done here step for step:

  1. find: every run of tokens equal to such a case's tokens (its PhraseMatcher on ORTH, every
     start and every length);
  2. filter (`_filter_special_spans`): the runs longest first, among equals the leftmost first; a
     run is kept unless its first or its last token was covered by a run seen before it, and every
     run seen, kept or not, covers its tokens;
  3. retokenize: a kept run whose text (its tokens with the single spaces between chunks) is a
     special case becomes that case's tokens; any other kept run stays as it is.

Each step is linear in the number of tokens (a case has a few tokens), where spaCy's affix steps
before it are not.
"""

from __future__ import annotations

import itertools


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


class SpecialCases:
    """The document-wide cases of one tokenizer: `may_change` (a quick necessary test) and `apply`."""

    def __init__(self, cases: dict[str, tuple[str, ...]], specials: dict[str, tuple[str, ...]]):
        """cases: document_cases(tokenizer); specials: every special case -> its tokens."""
        self.cases = cases
        self._specials = specials
        self._patterns = frozenset(cases.values())
        # the patterns as a trie: token -> [a pattern ends here, {next token: node}]
        self._trie: dict[str, list] = {}
        for pieces in self._patterns:
            children = self._trie
            for token in pieces:
                node = children.setdefault(token, [False, {}])
                children = node[1]
            node[0] = True
        self._longest = max(map(len, self._patterns), default=0)
        # The runs that change tokens when found within a chunk (where a run's text is its tokens
        # joined): by their first two tokens; those of one token apart.
        self._runs: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        self._singles = set()
        for pieces in sorted(self._patterns):
            if specials.get("".join(pieces), pieces) == pieces:
                continue
            if len(pieces) == 1:
                self._singles.add(pieces[0])
            else:
                self._runs.setdefault(pieces[:2], []).append(pieces)

    def may_change(self, tokens: list[str]) -> bool:
        """False when `apply` would return the chunk's tokens unchanged (a run of a changing case is absent)."""
        if self._singles and not self._singles.isdisjoint(tokens):
            return True
        runs = self._runs
        if len(tokens) < 2:
            return False
        pairs = zip(tokens, itertools.islice(tokens, 1, None), strict=False)
        if runs.keys().isdisjoint(pairs):
            return False
        for i, pair in enumerate(zip(tokens, itertools.islice(tokens, 1, None), strict=False)):
            for pieces in runs.get(pair, ()):
                if tuple(tokens[i:i + len(pieces)]) == pieces:
                    return True
        return False

    def apply(self, tokens: list[str], spaced: frozenset[int] = frozenset()) -> list[str]:
        """The tokens after spaCy's document-wide step. spaced: the indices of tokens followed by one space."""
        trie = self._trie
        n = len(tokens)
        found: dict[int, list[int]] = {}  # run length -> the starts of the runs found, in order
        for i, token in enumerate(tokens):
            node = trie.get(token)
            j = i + 1
            while node is not None:
                if node[0]:
                    found.setdefault(j - i, []).append(i)
                if j == n:
                    break
                node = node[1].get(tokens[j])
                j += 1
        if not found:
            return tokens
        # the filter: longest first, the leftmost first among equals; every run seen covers its tokens
        seen = bytearray(n)
        covered = b"\x01" * self._longest
        kept = []
        for size in sorted(found, reverse=True):
            for start in found[size]:
                end = start + size
                if not seen[start] and not seen[end - 1]:
                    kept.append((start, end))
                seen[start:end] = covered[:size]
        kept.sort()
        out: list[str] = []
        done = 0
        for start, end in kept:
            out.extend(tokens[done:start])
            text = "".join(t + " " if i in spaced else t for i, t in enumerate(tokens[start:end - 1], start))
            case = self._specials.get(text + tokens[end - 1])
            out.extend(tokens[start:end] if case is None else case)
            done = end
        out.extend(tokens[done:])
        return out
