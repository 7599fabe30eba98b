"""pipeline/tokenize/kinds/sp_json.py: gigatoken's own conversion of a .model, with the control pieces as text."""

import json

import pytest
import sentencepiece as spm

from pipeline.tokenize.kinds.sp_facts import NORMAL, USER_DEFINED
from pipeline.tokenize.kinds.sp_json import tokenizer_json
from pipeline.tokenize.kinds.sp_model import model_facts

gigatoken = pytest.importorskip("gigatoken", reason="the fast backends: pip install 'pile-pipeline[fast]'")

TEXTS = ["Hello world", "  leading and  double  spaces ", "tabs\tand\nnewlines", "naïve café 東京 😀",
         "digits 1234567890", "x" * 300, ""]


def _models(tmp_path, tiny_model):
    """The suite's tiny model, one without the dummy prefix or whitespace removal, and one with user symbols."""
    models = [tiny_model]
    texts = [t * 20 for t in TEXTS if t] + [open(__file__, encoding="utf-8").read()]
    for name, extra in (("raw", {"add_dummy_prefix": False, "remove_extra_whitespaces": False}),
                        ("user", {"user_defined_symbols": ["<tool>", "[MASK]"]})):
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(tmp_path / name),
                                       vocab_size=400, model_type="bpe", byte_fallback=True,
                                       normalization_rule_name="identity", minloglevel=2, num_threads=1, **extra)
        models.append(str(tmp_path / f"{name}.model"))
    return models


def test_the_conversion_is_gigatokens_own_with_the_control_pieces_as_text(tmp_path, tiny_model):
    # gigatoken's converter (a module of its own, used here only to compare): its tokenizer.json
    # with the control pieces taken out of the added tokens and the merges.
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    for path in _models(tmp_path, tiny_model):
        proto = open(path, "rb").read()
        facts = model_facts(proto)
        theirs = json.loads(sentencepiece_to_tokenizer_json(proto))
        theirs["added_tokens"] = [t for t in theirs["added_tokens"] if t["content"] not in facts.control_pieces]
        vocab = theirs["model"]["vocab"]
        special = {p for p, i in vocab.items() if facts.piece_types[i] not in (NORMAL, USER_DEFINED)}
        theirs["model"]["merges"] = [m for m in theirs["model"]["merges"] if m[0] + m[1] not in special]
        ours = json.loads(tokenizer_json(proto, facts))
        assert ours == theirs, path
        assert len(ours["model"]["merges"]) > 30


def test_the_converted_model_gives_sentencepieces_ids_and_keeps_specials_as_text(tmp_path, tiny_model):
    for path in _models(tmp_path, tiny_model):
        proto = open(path, "rb").read()
        sp = spm.SentencePieceProcessor(model_file=path)
        ours = gigatoken.Tokenizer.from_json(tokenizer_json(proto, model_facts(proto)))
        public = gigatoken.Tokenizer.from_sentencepiece(proto)  # gigatoken's public loader
        texts = TEXTS + ["a literal <s> and </s> and <unk> in a document"]
        for text in texts:
            assert ours.encode(text).tolist() == sp.encode(text), (path, text)
        assert public.encode("<s>").tolist() == [sp.bos_id()]  # what the conversion avoids
        assert ours.encode("<s>").tolist() == sp.encode("<s>") != [sp.bos_id()]


def test_a_model_no_fast_engine_reproduces_is_not_converted(tmp_path):
    spm.SentencePieceTrainer.train(sentence_iterator=iter([t * 20 for t in TEXTS if t]),
                                   model_prefix=str(tmp_path / "n"), vocab_size=300, model_type="bpe",
                                   byte_fallback=True, minloglevel=2, num_threads=1)
    proto = (tmp_path / "n.model").read_bytes()  # nmt_nfkc: a precompiled normalization map
    with pytest.raises(ValueError, match="precompiled normalization"):
        tokenizer_json(proto, model_facts(proto))
