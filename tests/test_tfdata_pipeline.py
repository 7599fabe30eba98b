"""tf.data reader on an output written by the real pipeline (`python -m pipeline.run`)."""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

from pipeline import tfdata

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "tokenizers", "sample", "sample.model")
SEQ_LEN = 16


def _corpus(path: str) -> list[str]:
    texts = []
    subsets = ["Pile-CC", "Wikipedia (en)", "Github", "ArXiv"]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(80):
            text = " ".join(f"Doc {i} says the river {j * i} meets the city of {subsets[i % 4]}." for j in range(i % 6))
            text = text or f"Short doc {i}."
            texts.append(text)
            f.write(json.dumps({"text": text, "meta": {"pile_set_name": subsets[i % 4]}}) + "\n")
    return texts


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    pytest.importorskip("apache_beam")
    run = pytest.importorskip("pipeline.run")
    if not os.path.exists(MODEL):
        pytest.skip(f"no tokenizer model at {MODEL}")
    tmp = tmp_path_factory.mktemp("pipeline")
    texts = _corpus(str(tmp / "in.jsonl"))
    out = str(tmp / "out")
    manifest = run.main(
        [
            "--input",
            str(tmp / "in.jsonl"),
            "--output_dir",
            out,
            "--tokenizer_model",
            MODEL,
            "--seq_len",
            str(SEQ_LEN),
            "--runner",
            "DirectRunner",
            "--direct_running_mode=in_memory",
            "--direct_num_workers=1",
            "--document_boundaries",
            "--shard_size_mb",
            "0.01",
        ]
    )
    return out, manifest, texts


def test_pipeline_output_reads_back_to_the_original_tokens(written):
    sp_module = pytest.importorskip("sentencepiece")
    out, manifest, texts = written
    sp = sp_module.SentencePieceProcessor(model_file=MODEL)
    eos = manifest["tokenizer"]["eos_id"]
    docs = [sp.encode(t) + [eos] for t in texts]
    assert len(manifest["shards"]) > 1

    labels = collections.Counter()
    fragments, records = [], 0
    for b in tfdata.make_dataset(out, 1, shuffle=False):  # batch 1, one rank: nothing dropped
        mask = b["loss_mask"].numpy()[0] > 0
        lab, inp = b["labels"].numpy()[0], b["inputs"].numpy()[0]
        seg = b["segment_ids"].numpy()[0]
        assert np.array_equal(inp[1:], lab[:-1])
        labels.update(lab[mask].tolist())
        for s in np.unique(seg[seg > 0]):
            fragments.append(lab[seg == s].tolist())
        records += 1
    assert records == manifest["totals"]["records"] == tfdata.steps_per_epoch(out, 1, 1)
    assert sum(labels.values()) == manifest["totals"]["label_tokens"]
    # Every label token of every document, exactly once...
    assert labels == collections.Counter(t for d in docs for t in d)

    # ...and every segment is a contiguous piece of one document.
    def inside(fragment):
        n = len(fragment)
        return any(d[i : i + n] == fragment for d in docs for i in range(len(d) - n + 1))

    assert all(inside(f) for f in fragments)


@pytest.mark.parametrize("dp_size", [2, 3])
def test_pipeline_output_sharded_across_ranks(written, dp_size):
    out, manifest, _ = written
    steps = tfdata.steps_per_epoch(out, 2, dp_size)
    seen = []
    for rank in range(dp_size):
        batches = list(tfdata.make_dataset(out, 2, dp_rank=rank, dp_size=dp_size, seed=17, verify=True))
        assert len(batches) == steps
        seen += [tuple(row) for b in batches for row in b["inputs"].numpy().tolist()]
    assert len(seen) == dp_size * steps * 2
    # Records can repeat in content here (a repetitive corpus), so compare multisets: the ranks
    # together hold a sub-multiset of the records, missing fewer than dp_size * batch of them.
    every = collections.Counter(
        tuple(row) for b in tfdata.make_dataset(out, 1, shuffle=False) for row in b["inputs"].numpy().tolist()
    )
    got = collections.Counter(seen)
    assert not got - every
    assert 0 <= sum((every - got).values()) == manifest["totals"]["records"] - len(seen) < dp_size * 2
