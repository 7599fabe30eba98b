"""A Llama-2-layout model (UNK=0, BOS=1, EOS=2, no PAD, byte fallback) works as given.

No real Llama-2 `tokenizer.model` can be downloaded here, so the tests train a tiny model with the
same special-id layout through the tokenizer trainer's own code path.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from sample_corpus import compose_lines

from pipeline.cli import run
from pipeline.config import tokenizer as tconfig
from pipeline.format import manifest as manifest_lib
from pipeline.tokenize import trainer as ttrainer
from pipeline.tokenize.kinds.detect import load_tokenizer


def train_tiny(prefix, texts, **overrides) -> str:
    """Train with the trainer's Llama-2 defaults (tiny vocab); returns the .model path."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    docs = [("Pile-CC", t) for t in texts]
    ttrainer.write_trainer_input(docs, prefix + ".txt", 4192)
    config = tconfig.TrainerConfig(**{"vocab_size": 500, "num_threads": 1, **overrides})
    with open(prefix + ".model", "wb") as f:
        f.write(ttrainer.train_model(prefix + ".txt", config))
    return prefix + ".model"


@pytest.fixture(scope="module")
def texts():
    return [json.loads(line)["text"] for line in compose_lines(random.Random(5), 200)]


@pytest.fixture(scope="module")
def llama_like(tmp_path_factory, texts) -> str:
    return train_tiny(str(tmp_path_factory.mktemp("llama") / "llama"), texts)


@pytest.fixture(scope="module")
def without_eos(tmp_path_factory, texts) -> str:
    return train_tiny(str(tmp_path_factory.mktemp("noeos") / "noeos"), texts, eos_id=-1)


def test_the_model_has_llamas_layout(llama_like):
    sp = load_tokenizer(llama_like).processor
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert [sp.id_to_piece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    assert sp.id_to_piece(3) == "<0x00>" and sp.id_to_piece(258) == "<0xFF>"  # byte pieces follow


def test_special_ids_come_from_the_model(llama_like):
    tok = load_tokenizer(llama_like)
    eos_only = tok.special_ids(add_bos=False, add_eos=True)
    assert (eos_only.bos_id, eos_only.eos_id, eos_only.unk_id, eos_only.pad_id) == (1, 2, 0, -1)
    assert eos_only.separator_id == 2
    assert eos_only.padding_id == 2  # no PAD piece: padded positions hold the separator (masked by valid_labels)
    both = tok.special_ids(add_bos=True, add_eos=True)
    assert (both.add_bos, both.add_eos, both.separator_id) == (True, True, 2)
    bos_only = tok.special_ids(add_bos=True, add_eos=False)
    assert bos_only.separator_id == 1


def test_a_model_without_eos_gives_a_clear_error(without_eos, tmp_path):
    tok = load_tokenizer(without_eos)
    assert tok.eos_id == -1
    with pytest.raises(ValueError, match=r"no EOS id \(looked for the model's own eos piece\) .* pass --eos_id N"):
        tok.special_ids(add_bos=False, add_eos=True)
    # The pipeline refuses before any worker starts, with the same message.
    write_lines(str(tmp_path / "in" / "a.jsonl.zst"), [pile_line("hello world")])
    with pytest.raises(ValueError, match="no EOS id"):
        run.main(["--input", str(tmp_path / "in" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "out"),
                           "--tokenizer_model", without_eos, *FAST_BEAM])
    assert not os.path.exists(tmp_path / "out" / manifest_lib.MANIFEST_NAME)
    # An explicit id works, and BOS alone is a valid boundary for such a model.
    assert tok.special_ids(add_bos=False, add_eos=True, eos_id=1).eos_id == 1  # <s>: a control piece
    assert tok.special_ids(add_bos=True, add_eos=False).separator_id == 1


def _label_tokens(output_dir: str, manifest: dict) -> np.ndarray:
    """Every label token of every record (tokens[1:], only the valid ones of the padded record)."""
    import tensorflow as tf

    dtype = np.dtype("<u2") if manifest["features"]["tokens"]["dtype"] == "uint16" else np.dtype("<i4")
    spec = {"tokens": tf.io.FixedLenFeature([], tf.string),
            "valid_labels": tf.io.FixedLenFeature([], tf.int64, default_value=manifest["seq_len"])}
    labels = []
    for shard in manifest["shards"]:
        for raw in tf.data.TFRecordDataset(os.path.join(output_dir, shard["path"])):
            example = tf.io.parse_single_example(raw, spec)
            tokens = np.frombuffer(example["tokens"].numpy(), dtype)
            labels.append(tokens[1 : 1 + int(example["valid_labels"])])
    return np.concatenate(labels).astype(np.int64)


@pytest.mark.slow
def test_the_manifest_records_the_ids_and_the_records_use_them(llama_like, tmp_path):
    rng = random.Random(9)
    lines = compose_lines(rng, 60)
    # Literal special-piece text is text: it must never become the BOS/EOS ids.
    lines += [pile_line("a literal <s> and </s> and <unk> in text", "Github"), pile_line("<s>", "ArXiv")]
    write_lines(str(tmp_path / "in" / "a.jsonl.zst"), lines)
    out = str(tmp_path / "out")
    manifest = run.main(["--input", str(tmp_path / "in" / "*.jsonl.zst"), "--output_dir", out,
                                  "--tokenizer_model", llama_like, "--seq_len", "64", "--add_bos", *FAST_BEAM])
    tok = manifest["tokenizer"]
    assert (tok["unk_id"], tok["bos_id"], tok["eos_id"], tok["pad_id"]) == (0, 1, 2, -1)
    assert (tok["add_bos"], tok["add_eos"], tok["separator_id"], tok["padding_id"]) == (True, True, 2, 2)
    assert tok["vocab_size"] == 500
    assert manifest_lib.load_manifest(out)["tokenizer"] == tok
    labels = _label_tokens(out, manifest)
    kept = manifest["totals"]["documents_kept"]
    # Each kept document contributes exactly one BOS and one EOS; the text itself never does.
    assert np.count_nonzero(labels == 1) == kept
    assert np.count_nonzero(labels == 2) == kept
    assert labels.max() < 500
