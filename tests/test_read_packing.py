"""Packing at read time as pure functions: layouts against the job's own packing, streams, the order and its state.

No store and no I/O: documents are lengths, their tokens a function of (document, index), so every
check below is exact. The reader over a store the job wrote: tests/test_docstore.py.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_fakes import EOS, LENGTHS, FakeStore, doc_tokens, filled, make_order, rank_steps, whole

from pipeline.core import best_fit, packing
from pipeline.core import read_packing as rp
from pipeline.reader.engine.doc_plan import StoreOrder, parse_schedule
from pipeline.reader.engine.doc_state import StoreStateError
from pipeline.reader.engine.doc_stream import BestFitStream, ConcatStream, DocumentOrder

# ------------------------------------------------------------------------------------------
# Layouts: the job's own packing, made from lengths
# ------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=25), seq_len=st.integers(1, 130))
def test_best_fit_layout_is_the_jobs_best_fit_packing(lengths, seq_len):
    store = FakeStore(lengths)
    n = len(lengths)
    docs = [doc_tokens(d, x) for d, x in enumerate(lengths)]
    expected, rest = best_fit.pack_documents(packing.build_stream(docs, EOS), lengths, seq_len, window=10**6,
                                             pad_id=0, final=True)
    out = filled(rp.best_fit_layout(np.arange(n), np.arange(n), np.zeros(n), lengths, seq_len), store)
    assert len(rest) == 0
    assert np.array_equal(out["tokens"], expected.tokens)
    assert np.array_equal(out["segment_ids"], expected.segment_ids)
    assert np.array_equal(out["positions"], expected.positions)
    assert np.array_equal(out["loss_mask"], expected.loss_mask)


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=25), seq_len=st.integers(1, 130))
def test_concat_layout_is_the_jobs_concat_packing(lengths, seq_len):
    store = FakeStore(lengths)
    n = len(lengths)
    stream = packing.build_stream([doc_tokens(d, x) for d, x in enumerate(lengths)], EOS)
    records, starts, _ = packing.pack(stream, seq_len)
    label_starts = np.cumsum(lengths) - lengths
    out = filled(rp.concat_layout(np.arange(n), np.arange(n), label_starts, lengths, 0, len(records), seq_len), store)
    assert np.array_equal(out["tokens"], records)
    if len(records):
        seg, pos = packing.segment_features(starts)
        assert np.array_equal(out["segment_ids"], seg) and np.array_equal(out["positions"], pos)


def test_the_worked_example_of_the_module_docstring():
    store = FakeStore([3, 6])
    lay = rp.concat_layout([0, 1], [0, 1], [0, 3], [3, 6], 0, 2, 4)
    assert filled(lay, store)["tokens"][:, 1:].tolist() == [
        [*doc_tokens(0, 3), doc_tokens(1, 6)[0]], doc_tokens(1, 6)[1:5].tolist()]
    lay = rp.best_fit_layout([0, 1], [0, 1], [0, 0], [3, 6], 4)
    assert lay.count == 3 and lay.ctx_doc.tolist() == [-1, -1, 1]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 90), min_size=1, max_size=25), seq_len=st.integers(1, 40),
       other=st.integers(1, 40), data=st.data())
def test_a_leftover_repacked_at_another_length_keeps_every_token_once(lengths, seq_len, other, data):
    store = FakeStore(lengths)
    n = len(lengths)
    lay = rp.best_fit_layout(np.arange(n), np.arange(n), np.zeros(n), lengths, seq_len)
    taken = data.draw(st.integers(0, lay.count))
    again = rp.best_fit_layout(*rp.leftover(lay, taken), other)
    seen = {}
    for part in (lay.select(np.arange(taken)), again):
        for d, s, k in zip(part.doc.tolist(), part.start.tolist(), part.length.tolist(), strict=True):
            for j in range(s, s + k):
                assert (d, j) not in seen
                seen[d, j] = True
    assert len(seen) == sum(lengths)
    out = filled(again, store)  # a re-cut piece follows the token before it
    for s in range(again.count):
        rows = again.select([s])
        if rows.start[0] > 0:
            assert out["tokens"][s, 0] == doc_tokens(int(rows.doc[0]), lengths[rows.doc[0]])[rows.start[0] - 1]


# ------------------------------------------------------------------------------------------
# Streams: every label once per epoch, whole documents, cursors
# ------------------------------------------------------------------------------------------

def concat_stream(store, cursor=None, shuffle=True, end=None):
    return ConcatStream(store.lengths, DocumentOrder(len(store.len), 11, shuffle), int(store.len.sum()), end,
                        cursor)


def bf_stream(store, cursor=None, end=None, window=37):
    return BestFitStream(store.lengths, DocumentOrder(len(store.len), 11, True), window, end, cursor)


def labels_of(layout, store) -> np.ndarray:
    out = filled(layout, store)
    return out["tokens"][:, 1:][out["loss_mask"] > 0]


@pytest.mark.parametrize("shuffle", [True, False])
def test_concat_gives_every_label_once_per_epoch_across_length_changes(shuffle):
    store = FakeStore(LENGTHS)
    stream = concat_stream(store, shuffle=shuffle, end=2)
    parts = []
    for count, seq_len in [(3, 64), (5, 17), (40, 128), (10**4, 50)]:
        parts.append(labels_of(stream.take(count, seq_len), store))
    labels = np.concatenate(parts)
    order = DocumentOrder(len(LENGTHS), 11, shuffle)
    expected = np.concatenate([doc_tokens(int(d), int(LENGTHS[d])) for e in (0, 1)
                               for d in order.docs(e, np.arange(len(LENGTHS)))])
    assert np.array_equal(labels, expected)
    assert stream.take(4, 8).real() == 0  # after the end: padding


def test_best_fit_keeps_every_document_whole_unless_longer_than_seq_len():
    store = FakeStore(LENGTHS)
    seq_len = 128
    lay = whole(bf_stream(store, end=1).take(10**4, seq_len))
    pieces = sorted((d, s) for d, s in zip(lay.doc.tolist(), lay.start.tolist(), strict=True))
    for d, length in enumerate(LENGTHS.tolist()):
        starts = [s for dd, s in pieces if dd == d]
        assert starts == list(range(0, length, seq_len)), d  # whole, or cut every seq_len tokens
    assert int(lay.length.sum()) == int(LENGTHS.sum())


@pytest.mark.parametrize("make", [concat_stream, bf_stream])
def test_a_stream_resumed_from_its_cursor_continues_exactly(make):
    store = FakeStore(LENGTHS)
    rng = np.random.default_rng(3)
    plan = [(int(rng.integers(1, 30)), int(rng.choice([16, 64, 100]))) for _ in range(25)]
    whole = make(store)
    expected = [filled(whole.take(n, L), store)["tokens"] for n, L in plan]
    stream = make(store)
    for i, (n, L) in enumerate(plan):
        cursor = json.loads(json.dumps(stream.cursor()))
        stream = make(store, cursor)  # as a resume would
        assert np.array_equal(filled(stream.take(n, L), store)["tokens"], expected[i]), i


# ------------------------------------------------------------------------------------------
# The order: ranks, resume, schedule
# ------------------------------------------------------------------------------------------


SCHEDULE = [{"step": 9, "seq_len": 48}, {"step": 14, "global_batch_size": 48}, {"step": 21, "seq_len": 20,
                                                                               "global_batch_size": 24}]


@pytest.mark.parametrize("packing_mode", ["concat", "best_fit"])
def test_global_batches_are_the_same_for_any_number_of_ranks_and_resume_on_another(packing_mode):
    store = FakeStore(LENGTHS)
    steps = 30
    full = rank_steps(make_order(store, SCHEDULE, packing_mode=packing_mode), 0, 1, store, steps)
    for w in (2, 3, 4, 8):
        ranks = [rank_steps(make_order(store, SCHEDULE, packing_mode=packing_mode), r, w, store, steps)
                 for r in range(w)]
        assert all(np.array_equal(np.concatenate([x[k] for x in ranks]), full[k]) for k in range(steps)), w
    saver = make_order(store, SCHEDULE, packing_mode=packing_mode)
    for k, w in [(1, 3), (8, 2), (9, 4), (13, 8), (15, 1), (22, 3)]:
        state = json.loads(json.dumps(saver.state(k)))
        ranks = [rank_steps(make_order(store, SCHEDULE, state=state, packing_mode=packing_mode), r, w, store,
                            steps - k, start=k) for r in range(w)]
        got = [np.concatenate([x[i] for x in ranks]) for i in range(steps - k)]
        assert all(np.array_equal(a, b) for a, b in zip(got, full[k:], strict=True)), (k, w)


def test_a_schedule_entry_is_taken_at_a_window_start_and_refused_inside_a_dealt_window():
    store = FakeStore(LENGTHS)
    old = make_order(store)  # windows of 96 // 24 = 4 steps
    at_start = json.loads(json.dumps(old.state(8)))
    inside = json.loads(json.dumps(old.state(9)))
    new = [{"step": 8, "seq_len": 64}]
    changed = make_order(store, new, state=at_start)
    assert changed.start_step == 8
    with pytest.raises(StoreStateError, match="inside steps 8..11"):
        make_order(store, [{"step": 10, "seq_len": 64}], state=inside)
    make_order(store, [{"step": 12, "seq_len": 64}], state=inside)  # from the window's end on: fine
    with pytest.raises(StoreStateError, match="schedule before step"):
        make_order(store, [{"step": 3, "seq_len": 64}], state=at_start)
    with pytest.raises(StoreStateError, match="seed"):
        StoreOrder(None, {"store": "fake", "packing": "concat"}, parse_schedule(24, 32), seed=6, shuffle=True,
                   window=96, token_bytes=2, state=at_start)


def test_one_order_shared_by_threads_gives_every_thread_the_same_batches(monkeypatch):
    """Two iterators of one dataset share its order (and its anchors, pruned as it goes): no thread
    sees an anchor vanish or the anchors change size under it, and each gets the single-thread batches."""
    import threading

    from pipeline.reader.engine import doc_plan

    monkeypatch.setattr(doc_plan, "_KEEP_ANCHORS", 2)  # prune all the time
    store = FakeStore(LENGTHS)
    starts = [0, 3, 7, 11, 16, 20, 26]
    alone = {k: rank_steps(make_order(store, window=24), 0, 1, store, 6, start=k) for k in starts}
    shared = make_order(store, window=24)
    got, errors = [], []

    def read(seed):
        try:
            for k in np.random.default_rng(seed).choice(starts, 40):
                got.append((int(k), rank_steps(shared, 0, 1, store, 6, start=int(k))))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(s,)) for s in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(got) == 160
    assert all(all(np.array_equal(a, b) for a, b in zip(batches, alone[k], strict=True)) for k, batches in got)
