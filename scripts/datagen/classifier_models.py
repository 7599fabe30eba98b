"""Classifier models for tests and benchmarks, made here from a seed: nothing is downloaded.

    write_fineweb_edu_like(folder, texts, size="tiny"|"real", labels=None, seed=0)

A BertForSequenceClassification directory (config, safetensors weights, a BERT WordPiece tokenizer
trained on `texts` with the `tokenizers` library) in the shape of FineWeb-Edu's classifier
(HuggingFaceFW/fineweb-edu-classifier: Snowflake arctic-embed-m, a BERT encoder of 12 layers, 768
wide, 12 heads, 3,072 inner, 512 positions, with a one-output regression head). size="tiny"
scales it down (2 layers, 32 wide, 2 heads, 64 inner; 512 positions kept, so truncation happens);
labels=("a", "b", ...) gives a classification head instead. The weights are random from `seed`; a
regression head's bias and scale are then set so that its scores on `texts` have mean 2.5 and
standard deviation 1.5 (FineWeb-Edu's range: every int score occurs). The tokenizer's vocabulary
is trained on the first 400 texts.
"""

from __future__ import annotations

import os

SIZES = {
    # initializer_range 0.5: a tiny random encoder's outputs then differ from text to text (at 0.02 they
    # agree to 1e-5, and a head scaled up to spread them would scale float32's rounding too).
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "initializer_range": 0.5},
    "real": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
}


def train_wordpiece(texts: list[str], vocab_size: int, folder: str) -> str:
    """A BERT uncased WordPiece vocabulary trained on `texts`; the vocab.txt path."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=1, show_progress=False)
    os.makedirs(folder, exist_ok=True)
    tokenizer.save_model(folder)
    return os.path.join(folder, "vocab.txt")


def write_fineweb_edu_like(folder: str, texts: list[str], size: str = "tiny", labels: tuple[str, ...] | None = None,
                           seed: int = 0) -> str:
    """The model directory (see the module docstring); returns `folder`."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    vocab = train_wordpiece(texts[:400], 2000 if size == "tiny" else 30522, folder)
    # transformers 5's BertTokenizer (the fast one) takes the vocabulary as `vocab`; it ignores
    # `vocab_file` and makes a tokenizer of its five special tokens alone.
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=512)
    if len(tokenizer) < 100:
        raise RuntimeError(f"the tokenizer of {vocab} has {len(tokenizer)} tokens")
    head = ({"num_labels": len(labels), "id2label": dict(enumerate(labels)),
             "label2id": {name: i for i, name in enumerate(labels)}}
            if labels else {"num_labels": 1, "problem_type": "regression"})
    config = BertConfig(vocab_size=max(tokenizer.vocab_size, 30522 if size == "real" else 0),
                        max_position_embeddings=512, **SIZES[size], **head)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    if not labels:
        with torch.no_grad():
            raw = torch.tensor([model(**tokenizer(text, return_tensors="pt", truncation=True)).logits.item()
                                for text in texts[:200]])
            scale = 1.5 / float(raw.std())
            model.classifier.weight.mul_(scale)
            model.classifier.bias.copy_((model.classifier.bias - raw.mean()) * scale + 2.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
