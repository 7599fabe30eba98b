"""In-graph tokenization with `tensorflow_text.SentencepieceTokenizer`, from the pipeline's `.model` file.

For tf.data input functions and serving graphs that must tokenize the way the pipeline did:

    tokenize = make_tokenizer("tokenizers/sample/sample.model")
    ds = tf.data.Dataset.from_tensor_slices(texts).map(tokenize.tokenize)   # int32 ids, no BOS/EOS

The same `.model` file gives the same ids as Python SentencePiece on every input we tested (code,
CJK, emoji, NUL characters, 1 MB lines without spaces, literal "<s>"/"</s>" text: a literal
"<s>" is text, never the BOS id): `tests/test_tf_text_parity.py` checks it, and `parity_mismatches`
lets a job re-check it on its own model and inputs. Detokenization differs in one place: for a
text that starts with several spaces, tensorflow_text's decoder (an older SentencePiece) may drop
some of them, because it strips the dummy prefix from every leading lone "▁" piece where
SentencePiece 0.2 strips it once. Everything else decodes identically. This module imports
TensorFlow but never Apache Beam.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from pipeline.io.files import read_bytes


def make_tokenizer(model_path: str, *, add_bos: bool = False, add_eos: bool = False,
                   out_type: tf.DType = tf.int32):
    """A `tensorflow_text.SentencepieceTokenizer` built from the model file's bytes.

    `add_bos`/`add_eos` use the model's own BOS/EOS ids (1 and 2 for Llama-2 layouts); the
    pipeline adds them itself, so leave them off to get the ids of the text alone.
    """
    import tensorflow_text as tft

    return tft.SentencepieceTokenizer(
        model=read_bytes(model_path), out_type=out_type, add_bos=add_bos, add_eos=add_eos
    )


def parity_mismatches(model_path: str, texts: Sequence[str], batch_size: int = 256) -> list[int]:
    """Indices of the texts whose tensorflow_text ids differ from Python SentencePiece's (empty: same).

    Run it on a model and a sample of real inputs before trusting the in-graph tokenizer with them.
    """
    import sentencepiece as spm

    proto = read_bytes(model_path)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    tokenizer = make_tokenizer(model_path)
    bad = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        ours = tokenizer.tokenize(tf.constant(batch, dtype=tf.string)).to_list()
        for i, (text, ids) in enumerate(zip(batch, ours, strict=True)):
            if sp.encode(text) != ids:
                bad.append(start + i)
    return bad
