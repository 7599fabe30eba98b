r"""Train a SentencePiece tokenizer on the sample: the trainer's sentences, the training, the files.

    pile-pipeline train-tokenizer --input 'train/*.jsonl.zst' --model_prefix tokenizers/pile32k/pile32k

writes PREFIX.model, PREFIX.vocab and PREFIX.card.json (the arguments, the trainer settings, the
sample's sha256 and per-subset sample sizes). The sample's rules are pipeline/tokenize/sample.py,
the sampling job pipeline/beam/sample.py, the card pipeline/tokenize/card.py, the options
pipeline/config/tokenizer.py, the command pipeline/cli/train_tokenizer.py.

Training (in the driver): each sampled document becomes trainer "sentences", one per line, split on
"\n" (newlines are learned through byte fallback, as in Llama-2), empty lines dropped, longer lines
cut at a space to at most `--max_sentence_length` bytes (SentencePiece would skip them). The
trainer uses all of them in sample order (`input_sentence_size=0`, no shuffling) and seeds its
random generator from `--seed`. The model's bytes also depend on `--num_threads`, which the card
records with the trainer's settings.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import posixpath
import tempfile
import time
from collections.abc import Iterable, Iterator

import sentencepiece as spm

from pipeline.io.files import sha256_of
from pipeline.io.publish import publish_copy
from pipeline.tokenize.card import TrainerSettings, build_card, describe_model
from pipeline.tokenize.sample import iter_sample, load_sample_stats

LOG = logging.getLogger(__name__)


def split_sentence(line: str, max_bytes: int) -> list[str]:
    """Cut one line into pieces of at most `max_bytes` UTF-8 bytes, at a space where one is near.

    A cut falls on the last space in the second half of the window, else on a character boundary.
    Pieces keep every character (spaces included), so joining them gives the line back.
    """
    data = line.encode("utf-8")
    if len(data) <= max_bytes:
        return [line]
    pieces = []
    start = 0
    while len(data) - start > max_bytes:
        end = start + max_bytes
        while end > start and (data[end] & 0xC0) == 0x80:  # never split a UTF-8 sequence
            end -= 1
        space = data.rfind(b" ", start + max_bytes // 2, end)
        if space > start:
            end = space
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    pieces.append(data[start:].decode("utf-8"))
    return pieces


def document_sentences(text: str, max_bytes: int) -> Iterator[str]:
    """The trainer's sentences for one document: its non-blank lines, long ones cut."""
    for line in text.split("\n"):
        if line.strip():
            yield from split_sentence(line, max_bytes)


def write_trainer_input(docs: Iterable[tuple[str, str]], path: str, max_bytes: int) -> tuple[int, str]:
    """Write the trainer's input (one sentence a line); returns (sentences, sha256)."""
    digest = hashlib.sha256()
    count = 0
    with open(path, "wb") as f:
        for _, text in docs:
            for sentence in document_sentences(text, max_bytes):
                data = sentence.encode("utf-8") + b"\n"
                digest.update(data)
                f.write(data)
                count += 1
    return count, digest.hexdigest()



def _read_sentences(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


def train_model(sentences_path: str, config: TrainerSettings) -> bytes:
    """Train SentencePiece on a sentences file (one a line); returns the serialized model.

    The sentences go in through an iterator and the model comes back through a writer, so that no
    file path is recorded in the model (SentencePiece stores `input` and `model_prefix` in it): the
    same sample and settings give the same bytes wherever they run.
    """
    spm.set_random_generator_seed(config.seed)
    out = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_read_sentences(sentences_path), model_writer=out, minloglevel=2,
            **config.trainer_kwargs(),
        )
    except RuntimeError as e:
        hint = ""
        if "too high" in str(e):
            hint = " (the sample is too small for this --vocab_size: lower it or draw a larger sample)"
        elif "required_chars" in str(e):
            hint = " (the characters to cover need more ids: raise --vocab_size or lower --character_coverage)"
        raise ValueError(f"SentencePiece training failed: {e}{hint}") from e
    return out.getvalue()


def vocab_text(model_proto: bytes) -> str:
    """The `.vocab` file SentencePiece writes beside a model: "piece<TAB>score" per id."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    # C++ streams print floats with 6 significant digits, as "%g" does.
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))



def train_from_sample(work_dir: str, model_prefix: str, trainer: TrainerSettings, args: dict) -> dict:
    """Train on the sample in `work_dir`, write PREFIX.model/.vocab/.card.json; returns the card."""
    sample_stats = load_sample_stats(work_dir)
    outputs = [model_prefix + ext for ext in (".model", ".vocab", ".card.json")]
    name = posixpath.basename(model_prefix)
    with tempfile.TemporaryDirectory(prefix="tokenizer-train-") as tmp:
        sentences_path = os.path.join(tmp, "sentences.txt")
        count, sha = write_trainer_input(iter_sample(work_dir), sentences_path, trainer.max_sentence_length)
        if count == 0:
            raise ValueError("The sample is empty: the inputs hold no selected document with text")
        LOG.info("training %s, vocab %d, on %d sentences", trainer.model_type, trainer.vocab_size, count)
        start = time.monotonic()
        proto = train_model(sentences_path, trainer)
        LOG.info("trained in %.1f s", time.monotonic() - start)
        model_path, vocab_path = os.path.join(tmp, name + ".model"), os.path.join(tmp, name + ".vocab")
        with open(model_path, "wb") as f:
            f.write(proto)
        with open(vocab_path, "w", encoding="utf-8", newline="\n") as f:
            f.write(vocab_text(proto))
        model = {
            "file": name + ".model",
            "sha256": sha256_of(model_path),
            "vocab_file": name + ".vocab",
            "vocab_sha256": sha256_of(vocab_path),
            "model_type": trainer.model_type,
            **describe_model(model_path),
        }
        card = build_card(args, trainer, sample_stats, {"sentences": count, "sha256": sha}, model)
        card_path = os.path.join(tmp, name + ".card.json")
        with open(card_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(card, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        # The card goes last: a card beside a model says that the model and vocab are complete.
        for local, dest in zip((model_path, vocab_path, card_path), outputs, strict=True):
            publish_copy(local, dest)
    LOG.info("wrote %s (sha256 %s)", outputs[0], model["sha256"])
    return card
