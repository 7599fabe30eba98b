"""The model card written beside a trained tokenizer (PREFIX.card.json), and a model's description.

The card is deterministic (no times or hosts): the same command gives the same card. What it
holds: the command's arguments, the model's file, hashes and special ids, the trainer's settings,
the trainer's input, the sample's statistics (pipeline/beam/sample.py).
"""

from __future__ import annotations

from typing import Protocol

import sentencepiece as spm

from pipeline.core.stats import sorted_dict
from pipeline.core.versions import created_by

CARD_FORMAT = "pile-tokenizer-card"
CARD_FORMAT_VERSION = 1


class TrainerSettings(Protocol):
    """What the trainer and the card read of the trainer's options (pipeline/config/tokenizer.py's `TrainerConfig`)."""

    model_type: str
    vocab_size: int
    max_sentence_length: int
    seed: int

    def trainer_kwargs(self) -> dict:
        """Arguments for SentencePieceTrainer.train (without input/model_prefix)."""
        ...


def describe_model(model_path: str) -> dict:
    """Vocabulary size, special ids and byte pieces of a model (for the card and the report)."""
    sp = spm.SentencePieceProcessor(model_file=model_path)
    size = sp.get_piece_size()
    return {
        "vocab_size": size,
        "unk_id": sp.unk_id(),
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "pad_id": sp.pad_id(),
        "byte_pieces": sum(1 for i in range(size) if sp.is_byte(i)),
    }


def build_card(args: dict, trainer: TrainerSettings, sample_stats: dict, trainer_input: dict, model: dict) -> dict:
    """The model card (deterministic: no times or hosts, so the same command gives the same card)."""
    return sorted_dict({
        "format": CARD_FORMAT,
        "format_version": CARD_FORMAT_VERSION,
        "created_by": f"{created_by()}, sentencepiece {spm.__version__}",
        "arguments": args,
        "model": model,
        "trainer": trainer.trainer_kwargs() | {"seed": trainer.seed},
        "trainer_input": trainer_input,
        "sample": sample_stats,
    })
