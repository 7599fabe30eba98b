"""Vocabularies over 65,536 ids: a Llama-3-shaped 128k tokenizer (ranks trained here) stored as int32 in
TFRecord and Megatron outputs, read back by the reader; uint16 stays the default below."""

import hashlib
import os

import numpy as np
import pytest
from kind_fixtures import real_documents, train_byte_level_bpe, write_llama3_shaped_ranks
from manifest_shape import assert_job_shaped
from synthetic_output import tokenizer_entry

from pipeline.format import framing, megatron, records
from pipeline.format import manifest as manifest_lib
from pipeline.io import outputs
from pipeline.tokenize.kinds.detect import load_tokenizer

SEQ_LEN = 64


@pytest.fixture(scope="module")
def llama3_like(tmp_path_factory):
    path = write_llama3_shaped_ranks(train_byte_level_bpe(3000), tmp_path_factory.mktemp("big") / "tokenizer.model")
    return load_tokenizer(str(path), tiktoken_name="llama3")


def test_a_llama3_shaped_ranks_file_has_its_special_ids(llama3_like):
    tok = llama3_like
    assert (tok.kind, tok.vocab_size, tok.bos_id, tok.eos_id) == ("tiktoken", 128_256, 128_000, 128_001)
    assert tok.special_sources["eos"] == "built-in llama3 ('<|end_of_text|>')"
    ids = tok.encode_one(real_documents()[0][:5000])
    assert min(ids) < 256 and max(ids) > 65_535
    assert tok.encode_one("<|begin_of_text|>x<|end_of_text|>") != [128_000, 87, 128_001]


def test_token_dtypes_follow_the_vocabulary_size():
    assert records.token_dtype_for(65_536) == np.dtype("<u2")
    assert records.token_dtype_for(128_256) == np.dtype("<i4")
    assert megatron.token_dtype(128_256) == np.dtype("<i4") and megatron.dtype_code(np.dtype("<i4")) == 4
    assert megatron.token_dtype(32_000) == np.dtype("<u2") and megatron.dtype_code(np.dtype("<u2")) == 8


def _pack(tok, texts):
    """One stream: EOS before every document; records of SEQ_LEN + 1 tokens overlapping by one."""
    stream = []
    for text in texts:
        stream += [tok.eos_id, *tok.encode_one(text)]
    stream.append(tok.eos_id)
    count = (len(stream) - 1) // SEQ_LEN
    return np.array(stream[: count * SEQ_LEN + 1], np.int64), count


def _write_output(out, tok, tokens, count):
    dtype = records.token_dtype_for(tok.vocab_size)
    name = "train-00000-of-00001.tfrecord"
    data = b"".join(framing.frame(records.serialize_example(tokens[r * SEQ_LEN : (r + 1) * SEQ_LEN + 1], dtype=dtype))
                    for r in range(count))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    manifest = {
        "format": manifest_lib.FORMAT, "format_version": manifest_lib.FORMAT_VERSION, "created_by": "tests",
        "split": "train", "seq_len": SEQ_LEN, "features": records.feature_spec(SEQ_LEN, dtype, False),
        "tokenizer": tokenizer_entry(tok.sha256, vocab_size=tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                     pad_id=tok.pad_id, unk_id=tok.unk_id),
        "shards": [{"path": name, "records": count, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
        "totals": {"records": count, "label_tokens": count * SEQ_LEN, "bytes": len(data), "documents_kept": count,
                   "lines": count},
        "subsets": {}, "packing": {"remainder_policy": "drop", "records_from_chunks": count, "records_from_tails": 0,
                                   "padding_labels": 0},
        "shuffle": {"num_shards": 1}, "dead_letters": {"by_reason": {}, "records": 0, "files": []}, "inputs": [],
        "config": {"seq_len": SEQ_LEN},
    }
    outputs.write_manifest(out, assert_job_shaped(manifest))
    return manifest


def test_a_128k_vocabulary_round_trips_through_records_and_the_reader(llama3_like, tmp_path):
    from pipeline import tfdata

    tok = llama3_like
    texts = [d[:3000] for d in real_documents()]
    tokens, count = _pack(tok, texts)
    assert tokens.max() > 65_535
    manifest = _write_output(str(tmp_path), tok, tokens, count)
    assert manifest["features"]["tokens"]["dtype"] == "int32"
    assert manifest_lib.load_manifest(str(tmp_path))["tokenizer"]["vocab_size"] == 128_256
    labels = []
    for batch in tfdata.make_dataset(str(tmp_path), 1, shuffle=False):
        inputs, got = batch["inputs"].numpy(), batch["labels"].numpy()
        assert np.array_equal(inputs[:, 1:], got[:, :-1])
        labels += got.reshape(-1).tolist()
    assert labels == tokens[1:].tolist()
    # Back to text: the documents between the EOS ids.
    stream = [tok.eos_id, *labels]
    bounds = [i for i, t in enumerate(stream) if t == tok.eos_id]
    decoded = [tok.decode(stream[a + 1 : b]) for a, b in zip(bounds[:-1], bounds[1:], strict=False)]
    assert decoded == texts[: len(decoded)] and len(decoded) >= len(texts) - 1


def test_a_128k_vocabulary_in_megatrons_indexed_format(llama3_like):
    tok = llama3_like
    docs = [[*tok.encode_one(d[:2000]), tok.eos_id] for d in real_documents()]
    dtype = megatron.token_dtype(tok.vocab_size)
    index = megatron.read_index(b"".join(megatron.index_parts(np.array([len(d) for d in docs]), dtype)))
    assert index.dtype == np.dtype("<i4") and index.bin_bytes == 4 * sum(len(d) for d in docs)
    data = b"".join(np.asarray(d, dtype).tobytes() for d in docs)
    first = np.frombuffer(data, dtype, int(index.lengths[0]), int(index.pointers[0]))
    assert first.tolist() == docs[0] and max(first) > 65_535
