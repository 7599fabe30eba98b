"""Read-time packing over document stores the job wrote (`--output_format megatron`), end to end.

Every check is against an independent decoding of the store (its .idx/.bin bytes read with NumPy
by the documented layout, `decode` below): every label once per epoch (concat), every document
whole unless longer than seq_len (best_fit), across a seq_len and a global batch change; the same
global batches for 1, 2, 3, 4 and 8 ranks; exact resume at any step, on another number of ranks;
a mixture of two stores; tf.data and PyTorch batch for batch; damaged stores refused before step 0;
each rank reading only its bytes; the documents of a step. The order's logic on its own, fast:
tests/test_read_packing.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from pipeline import tfdata
from pipeline.cli.provenance import store_documents
from pipeline.format.mixture import Mixture
from pipeline.pytorch import ShardIntegrityError, StoreDataset
from pipeline.reader.engine.doc_mixture import MixtureStoreReader, step_layouts
from pipeline.reader.engine.doc_reader import StoreReader, StoreSettings

pytestmark = pytest.mark.slow

G = 24  # divisible by 1, 2, 3, 4, 8


def decode(store: str) -> list[np.ndarray]:
    """Every document of a store, in store order, from the bytes alone (header: 9 + 8 + 1 + 8 + 8 bytes)."""
    manifest = json.loads((Path(store) / "manifest.json").read_text())
    docs = []
    for shard in manifest["shards"]:
        idx = (Path(store) / shard["idx"]["path"]).read_bytes()
        n = int.from_bytes(idx[18:26], "little")
        dtype = {8: np.dtype("<u2"), 4: np.dtype("<i4")}[idx[17]]
        lengths = np.frombuffer(idx, "<i4", n, 34)
        pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
        data = np.frombuffer((Path(store) / shard["bin"]["path"]).read_bytes(), dtype)
        docs += [data[p // dtype.itemsize : p // dtype.itemsize + k].astype(np.int64)
                 for p, k in zip(pointers.tolist(), lengths.tolist(), strict=True)]
    return docs


@pytest.fixture(scope="module")
def store(doc_stores):
    return doc_stores[0]


@pytest.fixture(scope="module")
def documents(store):
    docs = decode(store)
    assert len(docs) > 50 and sum(int((d == d[-1]).sum()) for d in docs) == len(docs)  # EOS ends each, only there
    return docs


def engine(location, dp_rank=0, dp_size=1, **kw) -> list[dict]:
    settings = StoreSettings(**{"global_batch_size": G, "seq_len": 64, "seed": 3, **kw})
    reader = MixtureStoreReader(location, settings, dp_rank, dp_size) if isinstance(location, Mixture) else \
        StoreReader(location, settings, dp_rank, dp_size)
    return list(reader)


def joined(per_rank: list[list[dict]]) -> list[dict]:
    assert len({len(r) for r in per_rank}) == 1  # every rank the same number of steps
    return [{k: np.concatenate([r[i][k] for r in per_rank]) for k in per_rank[0][i]} for i in range(len(per_rank[0]))]


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(set(x) == set(y) and all(np.array_equal(np.asarray(x[k]), np.asarray(y[k]))
                                                             for k in x) for x, y in zip(a, b, strict=True))


def tf_batches(ds) -> list[dict]:
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


def label_stream(batches: list[dict]) -> np.ndarray:
    return np.concatenate([b["labels"][b["loss_mask"] > 0] for b in batches])


def as_documents(labels: np.ndarray, eos: int) -> list[tuple]:
    cuts = np.flatnonzero(labels == eos) + 1
    assert cuts[-1] == len(labels)
    return [tuple(x.tolist()) for x in np.split(labels, cuts[:-1])]


SCHEDULE = [{"step": 7, "seq_len": 96}, {"step": 12, "global_batch_size": 48}, {"step": 15, "seq_len": 40,
                                                                               "global_batch_size": 24}]


def test_concat_gives_every_label_once_per_epoch_across_a_seq_len_and_a_batch_change(store, documents):
    # Windows of one step: the batches are the stream in order, so the labels are the documents
    # in the epoch's order, each once, whatever the seq_len and batch of each step.
    batches = engine(store, num_epochs=1, shuffle_buffer=G, schedule=tuple(SCHEDULE))
    assert [b["labels"].shape for b in batches[6:8]] == [(G, 64), (G, 96)]
    assert batches[12]["labels"].shape == (2 * G, 96) and batches[15]["labels"].shape == (G, 40)
    eos = int(documents[0][-1])
    got = as_documents(label_stream(batches), eos)
    assert sorted(got) == sorted(tuple(d.tolist()) for d in documents)  # each document once, whole
    assert got != [tuple(d.tolist()) for d in documents]  # in a shuffled order
    assert batches[0]["inputs"][0, 0] == eos  # the separator before the run's first label
    # Without shuffling: the store's order exactly.
    plain = engine(store, num_epochs=1, shuffle=False, seed=None, shuffle_buffer=G)
    assert as_documents(label_stream(plain), eos) == [tuple(d.tolist()) for d in documents]


def segments(batches: list[dict]) -> list[tuple]:
    out = []
    for b in batches:
        for labels, seg in zip(b["labels"], b["segment_ids"], strict=True):
            for s in np.unique(seg[seg > 0]):
                out.append(tuple(labels[seg == s].tolist()))
    return out


def test_best_fit_keeps_every_document_whole_unless_longer_than_seq_len(store, documents):
    seq_len = 64
    batches = engine(store, num_epochs=1, packing="best_fit", seq_len=seq_len, pack_window=40)
    expected = [tuple(d[i : i + seq_len].tolist()) for d in documents for i in range(0, len(d), seq_len)]
    assert sorted(segments(batches)) == sorted(expected)
    assert any(len(d) > seq_len for d in documents) and any(len(d) <= seq_len // 2 for d in documents)


def test_best_fit_across_a_seq_len_change_repeats_and_skips_nothing(store, documents):
    batches = engine(store, num_epochs=1, packing="best_fit", pack_window=40, schedule=tuple(SCHEDULE))
    labels = label_stream(batches)
    tokens = np.concatenate(documents)
    assert len(labels) == len(tokens) and np.array_equal(np.sort(labels), np.sort(tokens))
    whole = set(segments(batches))
    assert all(tuple(d.tolist()) in whole for d in documents if len(d) <= 40)  # short enough for every length


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_global_batches_are_the_same_for_1_2_3_4_8_ranks(store, packing):
    kw = dict(num_steps=14, shuffle_buffer=4 * G, packing=packing, schedule=tuple(SCHEDULE[:2]))
    one = engine(store, **kw)
    for w in (2, 3, 4, 8):
        assert same(joined([engine(store, r, w, **kw) for r in range(w)]), one), w
    # Through tf.data (concat): the same batches, rank by rank.
    if packing == "concat":
        ranks = [tf_batches(tfdata.make_dataset(store, global_batch_size=G, dp_rank=r, dp_size=3, seq_len=64, seed=3,
                                                shuffle_buffer=4 * G, num_steps=14, schedule=SCHEDULE[:2]))
                 for r in range(3)]
        assert same(joined(ranks), one)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_resume_at_any_step_on_another_number_of_ranks_is_exact(store, packing):
    kw = dict(seed=3, shuffle_buffer=4 * G, packing=packing, schedule=SCHEDULE)
    full = engine(store, num_steps=20, **kw)
    for k, w in [(3, 2), (7, 4), (9, 3), (14, 8), (16, 1)]:
        state = json.loads(json.dumps(tfdata.store_state(store, G, 64, k, **kw)))
        ranks = [tf_batches(tfdata.make_dataset(store, global_batch_size=G, dp_rank=r, dp_size=w, seq_len=64,
                                                state=state, num_steps=20 - k, **kw)) for r in range(w)]
        assert same(joined(ranks), full[k:]), (k, w)


def test_a_change_added_at_a_resume_applies_from_its_step(store):
    kw = dict(seed=3, shuffle_buffer=4 * G)
    state = tfdata.store_state(store, G, 64, 8, **kw)  # a window's start
    later = [{"step": 8, "seq_len": 32}]
    got = engine(store, state=state, num_steps=4, schedule=tuple(later), **kw)
    assert all(b["labels"].shape == (G, 32) for b in got)
    # The tokens go on where step 8 starts: the run's first 8 steps and these, in windows of one step.
    one = dict(seed=3, shuffle_buffer=G)
    first = engine(store, num_steps=8, **one)
    rest = engine(store, state=tfdata.store_state(store, G, 64, 8, **one), num_steps=4, schedule=tuple(later), **one)
    straight = engine(store, num_steps=16, **one)
    assert np.array_equal(label_stream(first + rest), label_stream(straight)[: len(label_stream(first + rest))])
    with pytest.raises(tfdata.StoreStateError, match="inside steps 8..11"):
        engine(store, state=tfdata.store_state(store, G, 64, 9, **kw), num_steps=2,
               schedule=({"step": 10, "seq_len": 32},), **kw)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_tfdata_and_pytorch_give_the_same_batches(store, packing):
    kw = dict(global_batch_size=G, seq_len=64, seed=3, packing=packing, num_steps=12, shuffle_buffer=4 * G,
              schedule=SCHEDULE[:1])
    ref = tf_batches(tfdata.make_dataset(store, dp_rank=1, dp_size=2, **kw))
    assert len(ref) == 12
    for workers in (0, 2):
        loader = DataLoader(StoreDataset(store, dp_rank=1, dp_size=2, **kw), batch_size=None, num_workers=workers)
        got = [{k: v.numpy().copy() for k, v in b.items()} for b in loader]
        assert got[0]["inputs"].dtype == np.int64 and got[0]["loss_mask"].dtype == np.float32
        assert same([{k: v.astype(ref[0][k].dtype) for k, v in b.items()} for b in got], ref), workers


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(store, workers):
    kw = dict(global_batch_size=G, seq_len=64, seed=3, num_steps=15, shuffle_buffer=4 * G, packing="best_fit")
    full = [{k: v.numpy().copy() for k, v in b.items()} for b in DataLoader(StoreDataset(store, **kw),
                                                                             batch_size=None)]
    loader = StatefulDataLoader(StoreDataset(store, **kw), batch_size=None, num_workers=workers)
    it = iter(loader)
    first = [{k: v.numpy().copy() for k, v in next(it).items()} for _ in range(6)]
    saved = loader.state_dict()
    del it, loader
    again = StatefulDataLoader(StoreDataset(store, **kw), batch_size=None, num_workers=workers)
    again.load_state_dict(saved)
    rest = [{k: v.numpy().copy() for k, v in b.items()} for b in again]
    assert same(first + rest, full)


def test_a_dataset_state_resumes_on_another_number_of_ranks(store):
    kw = dict(global_batch_size=G, seq_len=64, seed=3, num_steps=10, shuffle_buffer=4 * G)
    ds = StoreDataset(store, **kw)
    it = iter(ds)
    for _ in range(5):
        next(it)
    saved = json.loads(json.dumps(ds.state_dict()))
    full = engine(store, num_steps=10, shuffle_buffer=4 * G)
    ranks = []
    for r in range(4):
        resumed = StoreDataset(store, dp_rank=r, dp_size=4, **kw)
        resumed.load_state_dict(saved)
        ranks.append([{k: v.numpy() for k, v in b.items()} for b in resumed])
    assert same([{k: v.astype(full[0][k].dtype) for k, v in b.items()} for b in joined(ranks)], full[5:])


def test_a_mixture_of_two_stores(doc_stores):
    a, b = doc_stores
    mix = Mixture.of([("a", a, 0.7), ("b", b, 0.3)], schedule=[{"step": 6, "weights": {"a": 0.25, "b": 0.75}}])
    kw = dict(num_steps=12, shuffle_buffer=3 * G)
    one = engine(mix, **kw)
    assert same(joined([engine(mix, r, 4, **kw) for r in range(4)]), one)
    ref = tf_batches(tfdata.make_dataset(mix, global_batch_size=G, seq_len=64, seed=3, **kw))
    assert same(ref, one)
    torch_batches = [{k: v.numpy().astype(one[0][k].dtype) for k, v in t.items()}
                     for t in StoreDataset(mix, global_batch_size=G, seq_len=64, seed=3, **kw)]
    assert same(torch_batches, one)
    # Exact proportions in sequences: within 1 of n x weight at every n of each segment.
    reader = MixtureStoreReader(mix, StoreSettings(global_batch_size=G, seq_len=64, seed=3, **kw))
    sources = np.array([d for k in range(12) for _, d, _ in step_layouts(reader, k)])
    for segment, weight in ((sources[: 6 * G], 0.3), (sources[6 * G :], 0.75)):
        n = np.arange(1, len(segment) + 1)
        assert np.all(np.abs(np.cumsum(segment == 1) - n * weight) < 1)
    # Each sequence's segments are the pieces of its source's documents that its layout names.
    decoded = [decode(a), decode(b)]
    for position, d, lay in step_layouts(reader, 7):
        labels, seg = one[7]["labels"][position], one[7]["segment_ids"][position]
        for i, (doc, start, length) in enumerate(zip(lay.doc.tolist(), lay.start.tolist(), lay.length.tolist(),
                                                     strict=True)):
            assert labels[seg == i + 1].tolist() == decoded[d][doc][start : start + length].tolist()
    # Resume from the state on another number of ranks.
    state = json.loads(json.dumps(tfdata.store_state(mix, G, 64, 7, seed=3, shuffle_buffer=3 * G)))
    resumed = joined([engine(mix, r, 2, state=state, num_steps=5, shuffle_buffer=3 * G) for r in range(2)])
    assert same(resumed, one[7:])


def damaged_copy(store: str, tmp_path: Path) -> tuple[Path, dict]:
    out = tmp_path / "store"
    shutil.copytree(store, out, symlinks=True)
    return out, json.loads((out / "manifest.json").read_text())


@pytest.mark.parametrize("damage", ["idx_flipped", "idx_cut", "bin_cut", "bin_missing", "idx_missing",
                                    "bin_flipped_verify"])
def test_a_damaged_store_is_refused_before_step_0_naming_the_file(store, tmp_path, damage):
    out, manifest = damaged_copy(store, tmp_path)
    shard = manifest["shards"][1]
    kind = "idx" if damage.startswith("idx") else "bin"
    path = out / shard[kind]["path"]
    data = bytearray(path.read_bytes())
    if "flipped" in damage:
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
    elif "cut" in damage:
        path.write_bytes(bytes(data[:-2]))
    else:
        path.unlink()
    verify = damage.endswith("verify")
    with pytest.raises(tfdata.ShardIntegrityError) as e:
        tfdata.make_dataset(str(out), global_batch_size=G, seq_len=64, seed=3, verify=verify)
    assert e.value.path == str(path)
    with pytest.raises(tfdata.ShardIntegrityError, match=shard[kind]["path"]):
        StoreDataset(str(out), global_batch_size=G, seq_len=64, seed=3, verify=verify)


def test_a_store_cut_while_reading_stops_with_the_files_name(store, tmp_path):
    out, manifest = damaged_copy(store, tmp_path)
    ds = tfdata.make_dataset(str(out), global_batch_size=G, seq_len=64, seed=3, shuffle_buffer=G)
    for shard in manifest["shards"]:
        os.truncate(out / shard["bin"]["path"], 0)
    with pytest.raises(tfdata.ShardIntegrityError, match="read 0 tokens"), tfdata.shard_errors():
        for _ in ds:
            pass


@pytest.mark.parametrize("damage", ["cut", "cut_to_header", "zeroed"])
def test_an_index_cut_or_zeroed_while_a_rank_reads_stops_it_naming_the_file(store, tmp_path, damage):
    """The .idx is read by position, not memory-mapped: no zeros read past its new end, no SIGBUS."""
    out, manifest = damaged_copy(store, tmp_path)
    kw = dict(global_batch_size=G, seq_len=64, seed=3, shuffle_buffer=G, num_epochs=2)
    full = [b["labels"] for b in StoreDataset(str(out), **kw)]
    ds = StoreDataset(str(out), **kw)
    it = iter(ds)
    got = [next(it)["labels"] for _ in range(2)]
    for shard in manifest["shards"]:
        path = out / shard["idx"]["path"]
        size = path.stat().st_size
        if damage == "zeroed":
            path.write_bytes(bytes(size))  # in place: the same file, the same size
        else:
            os.truncate(path, size // 2 if damage == "cut" else 34)
    with pytest.raises(ShardIntegrityError, match=r"\.idx: (read short|document .* the index was changed)") as e:
        for batch in it:
            got.append(batch["labels"])
    assert any(e.value.path == str(out / s["idx"]["path"]) for s in manifest["shards"])
    assert all(torch.equal(a, b) for a, b in zip(got, full, strict=False))  # what came before is the run's


def _bytes_read() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_each_rank_reads_only_the_bytes_it_uses(store, documents, packing, monkeypatch):
    from pipeline.reader.engine import store_index

    itemsize = 2
    total = sum(len(d) for d in documents) * itemsize
    index_bytes = len(documents) * (4 + 8 + 8)  # every entry of the .idx files
    index_reads = []  # bytes of each .idx read (by position)
    pread = os.pread
    monkeypatch.setattr(store_index.os, "pread", lambda fd, n, at: index_reads.append(n) or pread(fd, n, at))
    for w in (1, 4):
        for r in range(w):
            reader = StoreReader(store, StoreSettings(global_batch_size=G, seq_len=64, seed=3, num_epochs=1,
                                                      packing=packing), r, w)
            index_reads.clear()
            before = _bytes_read()
            batches = list(reader)
            read = _bytes_read() - before - sum(index_reads)
            # Its labels and each sequence's context token, and nothing else (+ /proc/self/io itself).
            used = sum(int(b["loss_mask"].sum()) + len(b["labels"]) for b in batches) * itemsize
            assert read <= used + 1024, (w, r, read, used)
            assert read >= sum(int(b["loss_mask"].sum()) for b in batches) * itemsize
            assert read < total / w * 1.2 + 4096, (w, r, read, total)
            # The index: every length once (every rank walks every document), the rank's pointers.
            assert 0 < sum(index_reads) <= 2 * index_bytes, (w, r, sum(index_reads), index_bytes)


def test_the_documents_of_a_read_time_packed_step_retokenized_are_its_tokens(store, tiny_model):
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    kw = dict(seed=3, seq_len=64, packing="best_fit", schedule=SCHEDULE[:1])
    for step in (2, 8):
        batch = engine(store, num_steps=step + 1, pack_window=1024, **{**kw, "schedule": tuple(SCHEDULE[:1])})[step]
        records = store_documents(store, step, G, **kw)
        assert [r.position for r in records] == list(range(G))
        for row, record in enumerate(records):
            labels = batch["labels"][row][batch["loss_mask"][row] > 0].tolist()
            got = []
            for piece in record.pieces:
                ids = sp.encode(piece.text) + [sp.eos_id()]
                got += ids[piece.first_token : piece.first_token + piece.tokens]
                assert piece.file.endswith(".jsonl.zst") and piece.line >= 1 and ":" in piece.stored
            assert got == labels, (step, row)


def test_make_dataset_refuses_what_a_store_does_not_take(store):
    with pytest.raises(ValueError, match="pass seq_len"):
        tfdata.make_dataset(store, global_batch_size=G, seed=3)
    with pytest.raises(ValueError, match="packing 'tight'"):
        tfdata.make_dataset(store, global_batch_size=G, seed=3, seq_len=8, packing="tight")
    with pytest.raises(ValueError, match=r"global batch 25 \(from step 3\) is not split by dp_size 2"):
        tfdata.make_dataset(store, global_batch_size=G, seed=3, seq_len=8, dp_size=2, dp_rank=0,
                            schedule=[{"step": 3, "global_batch_size": 25}])
    ds = tfdata.make_dataset(store, global_batch_size=G, seed=3, seq_len=8, keras=True, num_steps=2)
    x, y, w = next(iter(ds))
    assert isinstance(x, dict) and y.shape == (G, 8) and w.dtype == tf.float32
    assert torch.__version__  # the PyTorch reader's dependency is importable here


def test_settings_are_frozen_and_checked():
    with pytest.raises(ValueError, match="needs a seed"):
        StoreSettings(global_batch_size=G, seq_len=8)
    settings = StoreSettings(global_batch_size=G, seq_len=8, seed=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seq_len = 9
