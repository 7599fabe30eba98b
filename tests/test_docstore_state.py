"""A tampered state of a store the job wrote is refused by tf.data and PyTorch alike, the error naming the field.

From `store_state(S, 4, 64, 300, seed=0, shuffle_buffer=64)`: a cursor offset of -50 (tokens
repeated), of 10**7 (the run ending with no batch), a cursor epoch of -1, a step of -3 with the
window start it implies, a missing cursor or schedule, a position past the store or a string;
the same for a mixture of two stores and for the PyTorch dataset's `state_dict()`. The state as
saved resumes. The field checks on their own, fast: tests/test_store_state.py.
"""

from __future__ import annotations

import copy
import json

import pytest

from pipeline import tfdata
from pipeline.format.mixture import Mixture
from pipeline.pytorch import StoreDataset, StoreStateError

pytestmark = pytest.mark.slow

KW = dict(seed=0, shuffle_buffer=64)


def edit(state: dict, **cursor) -> dict:
    out = copy.deepcopy(state)
    for key, value in cursor.items():
        if key in ("step", "window_start"):
            out[key] = value
        elif value is None:
            del out["cursor"][key]
        else:
            out["cursor"][key] = value
    return out


TAMPERED = [
    ({"offset": -50}, "cursor.offset -50 is outside"),
    ({"offset": 10**7}, "cursor.offset 10000000 is outside"),
    ({"epoch": -1}, "cursor.epoch -1 is outside"),
    ({"step": -3, "window_start": -16}, "state field step -3 is outside"),
    ({"position": 10**9}, "cursor.position 1000000000 is outside"),
    ({"position": "7"}, "cursor.position '7': must be an integer"),
    ({"label": None}, "cursor: no label"),
]


@pytest.fixture(scope="module")
def saved(doc_stores) -> dict:
    return json.loads(json.dumps(tfdata.store_state(doc_stores[0], 4, 64, 300, **KW)))


@pytest.mark.parametrize("change,message", TAMPERED, ids=[str(c) for c, _ in TAMPERED])
def test_a_tampered_store_state_is_refused_by_both_readers(doc_stores, saved, change, message):
    state = edit(saved, **change)
    with pytest.raises(StoreStateError, match=message):
        tfdata.make_dataset(doc_stores[0], global_batch_size=4, seq_len=64, state=state, num_steps=3, **KW)
    with pytest.raises(StoreStateError, match=message):
        StoreDataset(doc_stores[0], global_batch_size=4, seq_len=64, state=state, num_steps=3, **KW)
    ds = StoreDataset(doc_stores[0], global_batch_size=4, seq_len=64, num_steps=3, **KW)
    with pytest.raises(StoreStateError, match=message):
        ds.load_state_dict(state)  # a store_state() itself
    if "step" not in change:
        with pytest.raises(StoreStateError, match=message):
            ds.load_state_dict({"order": state, "next": state["step"]})  # a state_dict()


def test_a_state_without_cursor_or_schedule_is_refused_naming_it(doc_stores, saved):
    for name in ("cursor", "schedule", "window_start"):
        state = {k: v for k, v in saved.items() if k != name}
        with pytest.raises(StoreStateError, match=f"no field '{name}'"):
            tfdata.make_dataset(doc_stores[0], global_batch_size=4, seq_len=64, state=state, **KW)


def test_the_state_as_saved_resumes_with_the_uninterrupted_runs_batches(doc_stores, saved):
    ds = tfdata.make_dataset(doc_stores[0], global_batch_size=4, seq_len=64, state=saved, num_steps=2, **KW)
    full = tfdata.make_dataset(doc_stores[0], global_batch_size=4, seq_len=64, num_steps=302, **KW)
    got = [b["labels"].numpy().tolist() for b in ds]
    expected = [b["labels"].numpy().tolist() for b in full.skip(300)]
    assert len(got) == 2 and got == expected


def test_a_dataset_state_dict_is_checked(doc_stores):
    ds = StoreDataset(doc_stores[0], global_batch_size=4, seq_len=64, num_steps=6, **KW)
    it = iter(ds)
    next(it)
    saved = json.loads(json.dumps(ds.state_dict()))
    fresh = StoreDataset(doc_stores[0], global_batch_size=4, seq_len=64, num_steps=6, **KW)
    for bad, message in [({**saved, "next": 5}, "state_dict field next 5 is not its order's step 1"),
                         ({**saved, "next": "1"}, "state_dict field next '1'"),
                         ({**saved, "extra": 1}, "state_dict: unknown extra"),
                         ({"order": {"x": 1}, "next": 0, "ended": True}, "order: None once the run has ended"),
                         ({**saved, "ended": "yes"}, "ended 'yes'")]:
        with pytest.raises(StoreStateError, match=message):
            fresh.load_state_dict(bad)
    fresh.load_state_dict(saved)
    assert [b["labels"].tolist() for b in fresh] == [b["labels"].tolist() for b in it]


def test_a_tampered_mixture_state_is_refused_naming_the_field(doc_stores):
    a, b = doc_stores
    mix = Mixture.of([("a", a, 0.6), ("b", b, 0.4)])
    state = json.loads(json.dumps(tfdata.store_state(mix, 4, 64, 40, **KW)))
    assert tfdata.make_dataset(mix, global_batch_size=4, seq_len=64, state=state, num_steps=1, **KW)
    for change, message in [(("cursors", 0, "offset"), "cursor.offset -50 is outside"),
                            (("cursors", 1, "epoch"), "cursor.epoch -1 is outside"),
                            (("cursors", 0, "label"), "cursor.label 64: the steps before"),
                            (("mixture", "step"), "state field step 40 is not the mixture's step"),
                            (("mixture", "window_start"), "state field window_start 99 is not the start")]:
        bad = copy.deepcopy(state)
        target = bad
        for key in change[:-1]:
            target = target[key]
        target[change[-1]] = {"offset": -50, "epoch": -1, "label": 64, "step": 41, "window_start": 99}[change[-1]]
        for read in (lambda s: tfdata.make_dataset(mix, global_batch_size=4, seq_len=64, state=s, **KW),
                     lambda s: StoreDataset(mix, global_batch_size=4, seq_len=64, state=s, **KW)):
            with pytest.raises(StoreStateError, match=message):
                read(bad)
    bad = {k: v for k, v in state.items() if k != "cursors"}
    with pytest.raises(StoreStateError, match="no field 'cursors'"):
        StoreDataset(mix, global_batch_size=4, seq_len=64, state=bad, **KW)


def test_a_resumed_mixture_of_stores_keeps_its_resume_point(doc_stores, monkeypatch):
    from pipeline.reader.engine import doc_mixture

    monkeypatch.setattr(doc_mixture, "_KEEP_ANCHORS", 2)  # prune every few windows
    mix = Mixture.of([("a", doc_stores[0], 0.6), ("b", doc_stores[1], 0.4)])
    state = tfdata.store_state(mix, 4, 64, 5, seed=0, shuffle_buffer=4)  # windows of one step
    ds = tfdata.make_dataset(mix, global_batch_size=4, seq_len=64, seed=0, shuffle_buffer=4, num_steps=12,
                             state=state)
    first = [b["labels"].numpy().tolist() for b in ds]  # 12 windows: anchors pruned
    again = [b["labels"].numpy().tolist() for b in ds]  # a new iterator (Keras makes one per epoch)
    assert again == first and len(first) == 12
