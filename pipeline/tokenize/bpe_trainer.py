"""Train a byte-level BPE `tokenizer.json` with Hugging Face `tokenizers` on the stratified sample.

    pile-pipeline train-tokenizer --kind bpe --input 'train/*.jsonl.zst' --model_prefix tokenizers/neox32k \
        --vocab_size 32000

GPT-NeoX-20B's recipe (its tokenizer was trained on the Pile): NFC normalization, the ByteLevel
pre-tokenizer (no prefix space) and decoder, `<|endoftext|>` (id 0) and `<|padding|>` (id 1) as
special tokens, the 256 byte symbols as the initial alphabet, then merges up to `--vocab_size`. It
writes the Hugging Face directory PREFIX/: tokenizer.json, tokenizer_config.json (`<|endoftext|>`
as BOS, EOS and UNK, `<|padding|>` as PAD, as GPT-NeoX-20B's) and card.json (the arguments, the
vocabulary size, the sample's sha256 and sizes, the library version); `pile-pipeline run
--tokenizer_model PREFIX` takes the directory. The same sample and vocabulary size give the same
tokenizer.json.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
import time

from pipeline.core.versions import created_by, package_version
from pipeline.io.files import sha256_of
from pipeline.io.publish import publish_copy
from pipeline.tokenize.sample import iter_sample, load_sample_stats

LOG = logging.getLogger(__name__)

ENDOFTEXT = "<|endoftext|>"
PADDING = "<|padding|>"
FILES = ("tokenizer.json", "tokenizer_config.json", "card.json")  # card.json last: the directory is complete


def output_files(prefix: str) -> list[str]:
    """The files a BPE training writes, in the order they are published."""
    return [posixpath.join(prefix, name) for name in FILES]


def train_bpe(texts, vocab_size: int):
    """A GPT-NeoX-20B-style byte-level BPE `tokenizers.Tokenizer` trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[ENDOFTEXT, PADDING],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def train_bpe_from_sample(work_dir: str, prefix: str, vocab_size: int, args: dict) -> dict:
    """Train on the sample in `work_dir`, write the directory PREFIX/ (see the module docstring); returns the card."""
    sample_stats = load_sample_stats(work_dir)
    if not sample_stats.get("documents"):
        raise ValueError("The sample is empty: the inputs hold no selected document with text")
    LOG.info("training byte-level BPE, vocab %d, on %d documents", vocab_size, sample_stats["documents"])
    start = time.monotonic()
    tok = train_bpe((text for _, text in iter_sample(work_dir)), vocab_size)
    LOG.info("trained in %.1f s", time.monotonic() - start)
    with tempfile.TemporaryDirectory(prefix="tokenizer-train-") as tmp:
        local = [os.path.join(tmp, name) for name in FILES]
        tok.save(local[0])
        with open(local[1], "w", encoding="utf-8") as f:
            json.dump({"bos_token": ENDOFTEXT, "eos_token": ENDOFTEXT, "unk_token": ENDOFTEXT, "pad_token": PADDING,
                       "add_prefix_space": False}, f, indent=1, sort_keys=True)
        card = {
            "format": "pile-pipeline-bpe-tokenizer-card",
            "created_by": f"{created_by()}, tokenizers {package_version('tokenizers')}",
            "arguments": args,
            "trainer": {"kind": "bpe", "vocab_size": vocab_size, "recipe": "GPT-NeoX-20B byte-level BPE",
                        "special_tokens": [ENDOFTEXT, PADDING]},
            "model": {"file": "tokenizer.json", "sha256": sha256_of(local[0]), "vocab_size": tok.get_vocab_size()},
            "sample": sample_stats,
        }
        with open(local[2], "w", encoding="utf-8") as f:
            f.write(json.dumps(card, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        for path, dest in zip(local, output_files(prefix), strict=True):
            publish_copy(path, dest)
    LOG.info("wrote %s (sha256 %s)", output_files(prefix)[0], card["model"]["sha256"])
    return card
