"""A SentencePiece BPE `.model` as the Hugging Face `tokenizer.json` gigatoken loads, specials as text.

The same conversion as transformers' `SpmConverter` and gigatoken's own loader (the vocabulary in id
order; every in-vocabulary split of a piece a merge, ranked by the merged piece's score; the
normalizer replacing SentencePiece's whitespace handling), except that no piece SentencePiece
never produces from text (control, unknown, unused, byte) is an added token or the result of a
merge: a literal "<s>" in a document stays text, as in SentencePiece. gigatoken's public loader
(`Tokenizer.from_sentencepiece`) matches control pieces in the text, so the job builds this and
hands it to `Tokenizer.from_json`. Pieces and scores come from SentencePiece itself (one batch call
each), the piece types from ModelFacts (pipeline/tokenize/kinds/sp_facts.py), on the self-check's
path. Only what a fast engine supports is converted (`model_problems`): anything else is a ValueError.
"""

from __future__ import annotations

from operator import itemgetter

import orjson
import sentencepiece as spm

from pipeline.tokenize.kinds.sp_facts import NORMAL, USER_DEFINED, ModelFacts


def tokenizer_json(proto: bytes, facts: ModelFacts) -> str:
    """The tokenizer.json of a byte-fallback BPE model without a precompiled normalization map."""
    if facts.model_type != "bpe" or not facts.byte_fallback:
        raise ValueError(f"only BPE models with byte fallback convert (this one: {facts.model_type}, "
                         f"byte_fallback={facts.byte_fallback})")
    if facts.has_charsmap or facts.treat_whitespace_as_suffix or not facts.escape_whitespaces:
        raise ValueError("only models without a precompiled normalization map, with escaped whitespace as a "
                         "prefix, convert")
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    ids = list(range(sp.vocab_size()))
    pieces, scores = sp.id_to_piece(ids), sp.get_score(ids)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    types = facts.piece_types
    normalizers = []
    if facts.remove_extra_whitespaces:
        normalizers += [{"type": "Strip", "strip_left": True, "strip_right": True},
                        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    if facts.add_dummy_prefix:
        normalizers.append({"type": "Prepend", "prepend": "▁"})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": pieces[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": False} for i in ids if types[i] == USER_DEFINED],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": sp.id_to_piece(sp.unk_id()),
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": _merges(pieces, scores, types, vocab),
        },
    }
    return orjson.dumps(spec).decode()


def _merges(pieces: list[str], scores: list[float], types: tuple[int, ...], vocab: dict[str, int]) -> list:
    """Every in-vocabulary split of a normal or user-defined piece, by the piece's score (highest first).

    Ties: shorter left part, then shorter right part, last (a stable sort in reverse); the splits of
    one piece in the order of their parts' ids.
    """
    merges = []
    for merged, score, kind in zip(pieces, scores, types, strict=True):
        if kind != NORMAL and kind != USER_DEFINED or len(merged) < 2:
            continue
        local = []
        for i in range(1, len(merged)):
            left = vocab.get(merged[:i])
            if left is not None and (right := vocab.get(merged[i:])) is not None:
                local.append((left, right, i))
        if len(local) > 1:
            local.sort()  # by the parts' ids: a split's left part alone tells it from the others
        merges += [(score, i, len(merged) - i, left, right) for left, right, i in local]
    merges.sort(key=itemgetter(0, 1, 2), reverse=True)
    return [(pieces[left], pieces[right]) for _, _, _, left, right in merges]
