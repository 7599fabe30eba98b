r"""The words of datatrove's quality filters: spaCy's blank-English tokens, computed once per text.

datatrove's Gopher, FineWeb and repetition filters call `split_into_words(text)`: spaCy's blank
English pipeline (`spacy.blank("en")`, no model, nothing downloaded) on the whole text, the token
texts stripped, the empty ones (whitespace) dropped. C4 counts each line's sentences with spaCy's
sentencizer on the same tokens. `SpacyWords` gives the same lists, faster:

- spaCy's tokenizer works on runs of non-whitespace characters (`str.split()`'s pieces, "chunks")
  one at a time, so a chunk's tokens are remembered (a bounded dict) and a new chunk costs one
  batched tokenizer call (the new chunks of a text joined by "\n", which keeps them apart);
- one exception: spaCy's special cases of several tokens (`"x."`, `":x"`, `"'s"`: 362 in spaCy 3.8)
  are matched over the whole document, so a match that would straddle two chunks separated by one
  space (`": x.A"`: `":x"` against `"x."`) can block a match inside a chunk. A text where a chunk
  ends with the left part of such a case and the next begins with its right part is tokenized by
  spaCy whole, exactly as datatrove does;
- `words(text)` remembers the last text it saw, so filters run one after the other on the same
  text share one tokenization.

spaCy is imported on first use (a worker's `setup()`), never at import time.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

# Bounded memory: the chunk table is emptied when it holds this many chunks (~40 MB).
MAX_CHUNKS = 200_000

_CHUNK = re.compile(r"\S+")  # \s is str.isspace() (checked over all of Unicode), where spaCy and str.split() split


class SpacyWords:
    """spaCy blank-English tokens of a text, as datatrove's `split_into_words` and sentencizer see them."""

    def __init__(self):
        import spacy

        self._nlp = spacy.blank("en")
        self._tokenizer = self._nlp.tokenizer
        self._punct_chars = frozenset(self._nlp.add_pipe("sentencizer").punct_chars)
        self._nlp.remove_pipe("sentencizer")
        self._chunks: dict[str, tuple[str, ...]] = {}  # chunk -> its tokens
        pairs = self._straddling_cases()
        # right part of a straddling case -> the left parts it pairs with
        self._lefts_of: dict[str, tuple[str, ...]] = {}
        for left, right in sorted(pairs):
            self._lefts_of[right] = (*self._lefts_of.get(right, ()), left)
        self._rights = tuple(self._lefts_of)
        self._right_sizes = sorted({len(r) for r in self._rights})
        # chunk -> what a chunk before it must end with to straddle a case with it
        self._needs: dict[str, tuple[str, ...]] = {}
        self._last: tuple[str, list[str]] | None = None
        self._is_punct: dict[str, bool] = {}

    def _straddling_cases(self) -> frozenset[tuple[str, str]]:
        """(left, right): the cuts of every case spaCy matches over the document, between its tokens."""
        from spacy.tokenizer import Tokenizer

        tok = self._tokenizer
        bare = Tokenizer(self._nlp.vocab, rules={}, prefix_search=tok.prefix_search,
                         suffix_search=tok.suffix_search, infix_finditer=tok.infix_finditer,
                         token_match=tok.token_match, url_match=tok.url_match)
        pairs = set()
        for case in tok.rules:
            # spaCy matches a case over the document only when affixes would split it (faster_heuristics)
            if not (tok.find_prefix(case) or tok.find_infix(case) or tok.find_suffix(case) or " " in case):
                continue
            pieces = [t.text for t in bare(case)]  # the tokens the document-wide matcher looks for
            for i in range(1, len(pieces)):
                pairs.add(("".join(pieces[:i]), "".join(pieces[i:])))
        return frozenset(pairs)

    def _learn(self, chunks: list[str]) -> None:
        """Tokenize chunks not seen before, all in one tokenizer call."""
        new = list(dict.fromkeys(c for c in chunks if c not in self._chunks))
        if not new:
            return
        if len(self._chunks) + len(new) > MAX_CHUNKS:
            self._chunks.clear()
            self._needs.clear()
            new = list(dict.fromkeys(chunks))
        doc = self._tokenizer("\n".join(new))  # "\n" keeps chunks apart: no case holds whitespace
        tokens = iter(t.text for t in doc if not t.is_space)
        for chunk in new:
            taken, size = [], 0
            while size < len(chunk):
                taken.append(next(tokens))
                size += len(taken[-1])
            self._chunks[chunk] = tuple(taken)
            if chunk.startswith(self._rights):
                self._needs[chunk] = tuple(left for size in self._right_sizes
                                           for left in self._lefts_of.get(chunk[:size], ()))

    def _straddling(self, chunks: list[str]) -> list[int]:
        """The i where a case may straddle chunks i-1 and i (if one space parts them): a necessary condition."""
        needs = self._needs
        if needs.keys().isdisjoint(chunks):
            return []
        return [i for i, chunk in enumerate(chunks) if i and chunk in needs
                and chunks[i - 1].endswith(needs[chunk])]

    def _spacy(self, text: str) -> list[str]:
        """The tokens of spaCy on the whole text, as datatrove calls it (its IS_ALPHA workaround included)."""
        try:
            doc = self._tokenizer(text)
        except Exception:
            if "IS_ALPHA" not in text:
                raise
            doc = self._tokenizer(text.replace("IS_ALPHA", ""))
        return [t.text for t in doc]

    def tokens(self, text: str, spaces: bool = False) -> list[str]:
        """The text's tokens in order, without whitespace tokens (spaces=True: " " where spaCy has any)."""
        chunks = text.split()
        self._learn(chunks)
        straddling = self._straddling(chunks)
        if not straddling and not spaces:
            return list(itertools.chain.from_iterable(map(self._chunks.__getitem__, chunks)))
        if not straddling and " ".join(chunks) == text:
            return list(itertools.chain.from_iterable(map(self._chunks.__getitem__, chunks)))
        spans = [m.span() for m in _CHUNK.finditer(text)]
        # A case can straddle two chunks only when one space parts them (no whitespace token between):
        # such chunks are tokenized together, as spaCy would within the whole text.
        joined = {i for i in straddling if text[spans[i - 1][1] : spans[i][0]] == " "}
        out: list[str] = []
        i = 0
        while i < len(chunks):
            if i and spaces and text[spans[i - 1][1] : spans[i][0]] != " ":
                out.append(" ")  # the whitespace token(s) spaCy makes of any other run of whitespace
            j = i + 1
            while j in joined:
                j += 1
            if j == i + 1:
                out.extend(self._chunks[chunks[i]])
            else:
                out.extend(t for t in self._spacy(text[spans[i][0] : spans[j - 1][1]]) if not t.isspace())
            i = j
        return out

    def words(self, text: str) -> list[str]:
        """The words of datatrove's `split_into_words(text)` for English (the last list is reused: do not change it)."""
        last = self._last
        if last is not None and (last[0] is text or last[0] == text):
            return last[1]
        words = self.tokens(text)
        self._last = (text, words)
        return words

    def sentence_count(self, line: str) -> int:
        """The number of sentences spaCy's sentencizer finds in a stripped line (datatrove's C4 count).

        The sentencizer starts a sentence at the first token after one of its punctuation characters
        that is neither punctuation itself nor one of them; whitespace tokens (what is left of a
        run of whitespace other than one " ") are such tokens, and one or several count alike.
        """
        return self._count_sentences(self.tokens(line, spaces=True)) if line else 1

    def _count_sentences(self, tokens) -> int:
        punct_chars, is_punct = self._punct_chars, self._is_punct
        count, seen_period = 1, False
        for token in tokens:
            in_chars = token in punct_chars
            if seen_period and not in_chars:
                punct = is_punct.get(token)
                if punct is None:
                    punct = is_punct[token] = all(unicodedata.category(ch).startswith("P") for ch in token)
                    if len(is_punct) > MAX_CHUNKS:
                        is_punct.clear()
                if not punct:
                    count += 1
                    seen_period = False
            elif in_chars:
                seen_period = True
        return count
