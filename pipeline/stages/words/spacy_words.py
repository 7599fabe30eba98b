r"""SpacyWords: a text's spaCy blank-English tokens, from its chunks, computed once per text.

datatrove's Gopher, FineWeb and repetition filters call `split_into_words(text)`: spaCy's blank
English pipeline (`spacy.blank("en")`, no model, nothing downloaded) on the whole text, the token
texts stripped, the empty ones (whitespace) dropped. C4 counts each line's sentences with spaCy's
sentencizer on the same tokens. `SpacyWords` gives the same lists, faster, in time linear in the
text's length, without calling spaCy's tokenizer:

- spaCy's tokenizer works on runs of non-whitespace characters (`str.split()`'s pieces, "chunks")
  one at a time, so a chunk's tokens are remembered (a bounded dict); a chunk of ASCII letters that
  is no special case is one token; the other new chunks go through `chunk_tokens.ChunkTokens`
  (spaCy's affix, infix and special-case steps, in Python, with the tokenizer's own patterns and cases);
- one exception: spaCy's special cases of several tokens (`"x."`, `":x"`, `"'s"`: 362 in spaCy 3.8)
  are matched over the whole document, so a match that would straddle two chunks separated by one
  space (`": x.A"`: `":x"` against `"x."`) can block a match inside a chunk. Where a chunk may end
  with the left part of such a case and the next one begin with its right part, with one space
  between, the two (or more) are tokenized together (their affix tokens, then the document-wide
  cases over them all), as spaCy does within the whole text;
- `words(text)` remembers the last text it saw, so filters run one after the other on the same
  text share one tokenization.

spaCy is imported on first use (a worker's `setup()`), never at import time; its tokenizer runs
only where its patterns are beyond what `spacy_patterns` reads (every chunk then).
"""

from __future__ import annotations

import itertools
import re
import threading
import unicodedata

# Bounded memory: two generations of at most this many chunks each (~30 MB each). When the table is
# full it becomes the older generation, from which the chunks seen again move back; the rest go.
MAX_CHUNKS = 150_000
# Chunks, and windows of chunks tokenized together, are remembered up to this length: a longer one is
# rarely seen twice, and the table's memory stays bounded by its count of entries.
MAX_WINDOW = 1000
# \s is str.isspace() (checked over all of Unicode): where spaCy and str.split() split.
_WHITESPACE = re.compile(r"\s+")


class SpacyWords:
    """spaCy blank-English tokens of a text, as datatrove's `split_into_words` and sentencizer see them."""

    def __init__(self):
        from pipeline.stages.words.chunk_tokens import ChunkTokens, Unsupported

        self._load()
        try:
            self._fast: ChunkTokens | None = ChunkTokens(self._tokenizer)
        except Unsupported:  # patterns beyond what spacy_patterns reads: spaCy tokenizes every chunk
            self._fast = None
        self._rules = frozenset(self._tokenizer.rules)
        self._punct_chars = frozenset(self._nlp.add_pipe("sentencizer").punct_chars)
        self._nlp.remove_pipe("sentencizer")
        self._chunks: dict[str, tuple[str, ...]] = {}  # chunk (or a window of chunks) -> its tokens
        pairs, self._merged = self._straddling_cases()
        # right part of a straddling case -> the left parts it pairs with
        self._lefts_of: dict[str, tuple[str, ...]] = {}
        for left, right in sorted(pairs):
            self._lefts_of[right] = (*self._lefts_of.get(right, ()), left)
        self._rights = tuple(self._lefts_of)
        self._right_firsts = frozenset(right[0] for right in self._rights)
        self._right_sizes = sorted({len(r) for r in self._rights})
        # chunk -> what a chunk before it must end with to straddle a case with it
        self._needs: dict[str, tuple[str, ...]] = {}
        self._older: dict[str, tuple[str, ...]] = {}  # the generation before (its chunks and needs)
        self._older_needs: dict[str, tuple[str, ...]] = {}
        self._last: tuple[str, list[str]] | None = None
        self._is_punct: dict[str, bool] = {}
        self._long: list[str] = []  # the chunks of the text at hand too long to remember

    def _load(self) -> None:
        """A fresh blank-English pipeline (made again at a turnover once its vocabulary passes MAX_CHUNKS strings).

        Its vocabulary grows with every new word it tokenizes; spaCy's memory zones would free the
        words, but its tokenizer then fails on words a zone freed, so the pipeline is replaced instead.
        """
        import spacy

        self._nlp = spacy.blank("en")
        # Token texts depend on the tokenizer's rules and affixes, never on a word's attributes
        # (shape, like_num, ...), which spaCy computes in Python for every new word: none here.
        self._nlp.vocab.lex_attr_getters = {}
        self._tokenizer = self._nlp.tokenizer

    def _straddling_cases(self) -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
        """(left, right) cuts of every case spaCy matches over the document; the tokens such cases make."""
        from spacy.attrs import ORTH

        from pipeline.stages.words.special_cases import document_cases

        pairs, merged = set(), set()
        for case, pieces in document_cases(self._tokenizer).items():  # the tokens the matcher looks for
            for i in range(1, len(pieces)):
                pairs.add(("".join(pieces[:i]), "".join(pieces[i:])))
            merged.update(sub[ORTH] for sub in self._tokenizer.rules[case])
        return frozenset(pairs), frozenset(merged)

    def _learn(self, chunks: list[str]) -> None:
        """Tokenize the chunks not seen before."""
        new = set(chunks).difference(self._chunks)
        if not new:
            return
        if len(self._chunks) + len(new) > MAX_CHUNKS:
            self._older, self._older_needs = self._chunks, self._needs
            self._chunks, self._needs = {}, {}
            if len(self._nlp.vocab.strings) > MAX_CHUNKS:
                self._load()
            new = set(chunks)
        if self._older:
            again = self._older.keys() & new  # (walks `new`, the smaller; set.intersection(dict) walks the dict)
            for chunk in again:
                self._chunks[chunk] = self._older[chunk]
                if chunk in self._older_needs:
                    self._needs[chunk] = self._older_needs[chunk]
            new.difference_update(again)
            if not new:
                return
        # ASCII letters alone are one token unless a special case ("dont", "gonna"): no prefix,
        # suffix or infix of spaCy's English matches letters alone (tests/test_stage_words.py).
        rules, table, fast = self._rules, self._chunks, self._fast
        plain = [c for c in new if c.isascii() and c.isalpha() and c not in rules]
        table.update(zip(plain, zip(plain), strict=True))  # chunk -> (chunk,)
        for chunk in (self._lefts_of.keys() | self._merged).intersection(plain):  # what _remember would note
            self._remember(chunk, (chunk,))
        new.difference_update(plain)
        if fast is not None:
            for chunk in new:
                self._remember(chunk, fast.tokens(chunk))
                if len(chunk) > MAX_WINDOW:
                    self._long.append(chunk)
            return
        if not new:
            return
        # spaCy itself (a tokenizer whose patterns spacy_patterns cannot read). "\n" keeps chunks
        # apart (no case holds a newline) and is a token of its own between them.
        hard = sorted(new)
        tokens: list[str] = []
        names = iter(hard)
        for token in [t.text for t in self._tokenizer("\n".join(hard))]:
            if token == "\n":
                self._remember(next(names), tokens)
                tokens = []
            else:
                tokens.append(token)
        self._remember(next(names), tokens)

    def _remember(self, chunk: str, tokens) -> None:
        self._chunks[chunk] = tokens = tuple(tokens)
        if len(tokens) == 1 and chunk not in self._merged:  # a case can be cut only at its end
            lefts = self._lefts_of.get(chunk)
            if lefts:
                self._needs[chunk] = lefts
            return
        if chunk[0] in self._right_firsts and chunk.startswith(self._rights):
            lefts_of = self._lefts_of
            lefts = tuple(left for size in self._right_sizes if chunk[:size] in lefts_of and self._may_cut(tokens, size)
                          for left in lefts_of[chunk[:size]])
            if lefts:
                self._needs[chunk] = lefts

    def _may_cut(self, tokens, at: int) -> bool:
        """Whether, before the document-wide matching, a token of the chunk could end at `at`.

        That matching only merges tokens into a case's pieces, so a token boundary before it is
        one after it, or falls inside a piece of a case.
        """
        if at == 0:
            return True
        end = 0
        for token in tokens:
            end += len(token)
            if end == at:
                return True
            if end > at:
                return token in self._merged
        return False

    def _straddling(self, chunks: list[str]) -> list[int]:
        """The i where a case may straddle chunks i-1 and i (if one space parts them): a necessary condition."""
        needs = self._needs
        if needs.keys().isdisjoint(chunks):
            return []
        return [i for i in itertools.compress(range(len(chunks)), map(needs.__contains__, chunks))
                if i and any(chunks[i - 1].endswith(left)
                             and self._may_cut(self._chunks[chunks[i - 1]], len(chunks[i - 1]) - len(left))
                             for left in needs[chunks[i]])]

    def _spacy(self, text: str) -> list[str]:
        """The tokens of spaCy on a text, as datatrove calls it (its IS_ALPHA workaround included)."""
        try:
            return [t.text for t in self._tokenizer(text)]
        except Exception:
            if "IS_ALPHA" not in text:
                raise
            return [t.text for t in self._tokenizer(text.replace("IS_ALPHA", ""))]

    def tokens(self, text: str, spaces: bool = False) -> list[str]:
        """The text's tokens in order, without whitespace tokens (spaces=True: " " where spaCy has any)."""
        chunks = text.split()
        self._learn(chunks)
        try:
            return self._tokens(text, chunks, spaces)
        finally:
            if self._long:  # chunks too long to keep: this text's only
                for chunk in self._long:
                    self._chunks.pop(chunk, None)
                    self._needs.pop(chunk, None)
                self._long.clear()

    def _tokens(self, text: str, chunks: list[str], spaces: bool) -> list[str]:
        table = self._chunks
        straddling = self._straddling(chunks)
        if not straddling and (not spaces or " ".join(chunks) == text):
            return list(itertools.chain.from_iterable(map(table.__getitem__, chunks)))
        seps = _WHITESPACE.findall(text)  # seps[i - 1] parts chunks[i - 1] and chunks[i]
        if text[:1].isspace():
            del seps[0]
        # A case can straddle two chunks only when one space parts them (no whitespace token between):
        # such chunks are tokenized together, as spaCy does within the whole text.
        joined = sorted(i for i in straddling if seps[i - 1] == " ")
        if spaces:
            return self._spaced(chunks, seps, set(joined))
        out: list[str] = []
        done = k = 0  # chunks[:done] are in out; joined[k] is the next window
        while k < len(joined):
            start, end = joined[k] - 1, joined[k] + 1  # the window chunks[start:end]
            k += 1
            while k < len(joined) and joined[k] == end:
                end += 1
                k += 1
            out.extend(itertools.chain.from_iterable(map(table.__getitem__, chunks[done:start])))
            out.extend(self._window(chunks[start:end]))
            done = end
        out.extend(itertools.chain.from_iterable(map(table.__getitem__, chunks[done:])))
        return out

    def _window(self, chunks: list[str]) -> tuple[str, ...]:
        """The tokens of chunks one space apart, tokenized together (remembered by the text, never a chunk's)."""
        window = " ".join(chunks)
        tokens = self._chunks.get(window)
        if tokens is not None:
            return tokens
        fast = self._fast
        if fast is None:
            tokens = tuple(t for t in self._spacy(window) if not t.isspace())
        else:
            # each chunk's affix tokens, then the document-wide cases over them all, as spaCy does
            # on the window's text; the last token of each chunk but the last is followed by " "
            pieces: list[str] = []
            spaced = []
            for chunk in chunks:
                pieces.extend(fast.affix_tokens(chunk))
                spaced.append(len(pieces) - 1)
            tokens = tuple(fast.cases.apply(pieces, frozenset(spaced[:-1])))
        if len(window) <= MAX_WINDOW:
            self._chunks[window] = tokens
        return tokens

    def _spaced(self, chunks: list[str], seps: list[str], joined: set[int]) -> list[str]:
        """tokens(spaces=True) where whitespace other than one space parts chunks, or a case straddles two."""
        out: list[str] = []
        i = 0
        while i < len(chunks):
            if i and seps[i - 1] != " ":
                out.append(" ")  # the whitespace token(s) spaCy makes of any other run of whitespace
            j = i + 1
            while j in joined:
                j += 1
            out.extend(self._chunks[chunks[i]] if j == i + 1 else self._window(chunks[i:j]))
            i = j
        return out

    def forget(self) -> None:
        """Forget every chunk seen, as a new worker's table (measurements start cold with it)."""
        self._chunks, self._needs, self._older, self._older_needs = {}, {}, {}, {}
        self._last = None
        if self._fast is not None:
            self._fast.forget()

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
                    punct = all(unicodedata.category(ch).startswith("P") for ch in token)
                    if len(token) <= MAX_WINDOW:
                        is_punct[token] = punct
                    if len(is_punct) > MAX_CHUNKS:
                        is_punct.clear()
                if not punct:
                    count += 1
                    seen_period = False
            elif in_chars:
                seen_period = True
        return count


_THREAD = threading.local()


def thread_words() -> SpacyWords:
    """This thread's SpacyWords, shared by the stages that run on it (a table is no thread's to share)."""
    words = getattr(_THREAD, "words", None)
    if words is None:
        words = _THREAD.words = SpacyWords()
    return words
