"""A store reader's state read back from a checkpoint is checked field by field against the store, and sealed.

The order over a fake store (tests/store_fakes.py: documents as lengths), both packings: every field
changed (a cursor offset before its document or past it, an epoch before the run, a position past
the store, a label the steps before did not take, a negative step, a missing or unknown field, a
chain entry taking more than its packing holds) is a `StoreStateError` naming the field; a change
that passes a field's own checks (another document's position) is refused by the seal; the state
as saved, also through JSON, resumes. The same through tf.data and PyTorch over a store the job
wrote: tests/test_docstore_state.py.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from store_fakes import LENGTHS, FakeStore, make_order, rank_steps

from pipeline.reader.engine.doc_state import StoreStateError
from pipeline.reader.engine.doc_stream import ConcatStream, DocumentOrder

STEP = 13  # inside the window of steps 12..15


@pytest.fixture(scope="module")
def store():
    return FakeStore(LENGTHS)


_SAVED: dict[str, dict] = {}


def saved_state(store, packing: str) -> dict:
    """The order's state after STEP steps, through JSON (as a checkpoint keeps it)."""
    if packing not in _SAVED:
        _SAVED[packing] = json.loads(json.dumps(make_order(store, packing_mode=packing).state(STEP)))
    return copy.deepcopy(_SAVED[packing])


def changed(state: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(state)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_the_state_as_saved_resumes_exactly(store, packing):
    state = saved_state(store, packing)
    full = rank_steps(make_order(store, packing_mode=packing), 0, 1, store, STEP + 6)
    resumed = rank_steps(make_order(store, state=state, packing_mode=packing), 0, 1, store, 6, start=STEP)
    assert all(np.array_equal(a, b) for a, b in zip(resumed, full[STEP:], strict=True))
    assert state["check"] and len(state["check"]) == 32


COMMON = [
    (("step",), -3, "state field step -3 is outside"),
    (("step",), "13", "state field step '13': must be an integer"),
    (("step",), _DELETE, "state: no field 'step'"),
    (("window_start",), 8, "state field window_start 8 is not the window of step 13"),
    (("cursor",), _DELETE, "state: no field 'cursor'"),
    (("schedule",), _DELETE, "state: no field 'schedule'"),
    (("schedule",), "[[0, 24, 32]]", "state field schedule"),
    (("schedule",), [[0, 24, 32], [9, 24]], r"schedule entry 0 \[9, 24\]"),
    (("cursor", "epoch"), -1, "state field cursor.epoch -1 is outside"),
    (("cursor", "epoch"), 1.0, "state field cursor.epoch 1.0: must be an integer"),
    (("cursor", "extra"), 1, "state field cursor: unknown extra"),
    (("cursor",), "3", "state field cursor: '3' is not a dict"),
    (("check",), _DELETE, "state: no 'check' field"),
]
CONCAT = [
    (("cursor", "offset"), -50, "state field cursor.offset -50 is outside"),
    (("cursor", "offset"), 10**7, "state field cursor.offset 10000000 is outside"),
    (("cursor", "position"), len(LENGTHS), "state field cursor.position 400 is outside"),
    (("cursor", "position"), "3", "state field cursor.position '3': must be an integer"),
    (("cursor", "label"), _DELETE, "state field cursor: no label"),
]
BEST_FIT = [
    (("cursor", "window"), 8, "state field cursor.window 8 is outside"),  # 400 documents: windows 0..7 of 50
    (("cursor", "chain"), [[32]], r"state field cursor.chain\[0\] \[32\]: a pair"),
    (("cursor", "chain"), [[32, 10**6]], r"state field cursor.chain\[0\]: 1000000 sequences taken of a packing"),
    (("cursor", "chain"), [[32, 1], [32, 1]], r"state field cursor.chain\[1\]: seq_len 32 again"),
]


CASES = ([(p, *c) for p in ("concat", "best_fit") for c in COMMON] + [("concat", *c) for c in CONCAT]
         + [("best_fit", *c) for c in BEST_FIT])


@pytest.mark.parametrize("packing,path,value,message", CASES,
                         ids=[f"{k}:" + ".".join(p) + f"={v!r}"[:20] for k, p, v, _ in CASES])
def test_every_field_is_checked_and_the_error_names_it(store, packing, path, value, message):
    state = changed(saved_state(store, packing), path, value)
    with pytest.raises(StoreStateError, match=message):
        make_order(store, state=state, packing_mode=packing)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_a_negative_step_with_the_window_start_it_implies_is_refused(store, packing):
    state = changed(changed(saved_state(store, packing), ("step",), -3), ("window_start",), -4)
    with pytest.raises(StoreStateError, match="state field step -3 is outside"):
        make_order(store, state=state, packing_mode=packing)


def test_a_concat_label_the_steps_before_did_not_take_is_refused(store):
    state = make_order(store).state(STEP)
    # Steps 0..11 of 24 x 32 labels: 9216 labels before the window of step 13.
    assert state["cursor"]["label"] == 12 * 24 * 32
    with pytest.raises(StoreStateError, match="cursor.label 9217: the steps before the state's window take 9216"):
        make_order(store, state=changed(state, ("cursor", "label"), 9217))
    with pytest.raises(StoreStateError, match="cursor.epoch 1: label 9216 is in epoch 0"):
        make_order(store, state=changed(state, ("cursor", "epoch"), 1))


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_a_change_that_passes_the_fields_checks_is_refused_by_the_seal(store, packing):
    state = saved_state(store, packing)
    if packing == "concat":  # another document, at its first token: every field in range
        edit = changed(changed(state, ("cursor", "position"), (state["cursor"]["position"] + 1) % len(LENGTHS)),
                       ("cursor", "offset"), 0)
    else:
        edit = changed(state, ("cursor", "chain"), [[state["cursor"]["chain"][0][0], 0]])
    with pytest.raises(StoreStateError, match="its 'check' does not match its fields"):
        make_order(store, state=edit, packing_mode=packing)
    with pytest.raises(StoreStateError, match="its 'check' does not match"):
        make_order(store, state=changed(state, ("check",), "0" * 32), packing_mode=packing)


def test_a_finished_runs_cursor_is_checked_as_the_end(store):
    order = DocumentOrder(len(LENGTHS), 5, True)
    stream = ConcatStream(store.lengths, order, int(LENGTHS.sum()), 1, None)
    stream.take(10**4, 64)  # past the one epoch
    end = json.loads(json.dumps(stream.cursor()))
    assert end == {"label": int(LENGTHS.sum()), "epoch": 1, "position": 0, "offset": 0}
    ConcatStream(store.lengths, order, int(LENGTHS.sum()), 1, end)  # accepted
    with pytest.raises(StoreStateError, match="cursor.position 3 is outside"):
        ConcatStream(store.lengths, order, int(LENGTHS.sum()), 1, {**end, "position": 3})
    with pytest.raises(StoreStateError, match="cursor.epoch 2 is outside"):
        ConcatStream(store.lengths, order, int(LENGTHS.sum()), 1, {**end, "epoch": 2})


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_a_resumed_order_keeps_its_resume_point_while_pruning(store, monkeypatch, packing):
    """A new iterator from the resume step (Keras, a DataLoader: one per epoch) after many windows."""
    from pipeline.reader.engine import doc_plan

    monkeypatch.setattr(doc_plan, "_KEEP_ANCHORS", 2)  # prune every few windows
    state = make_order(store, window=24, packing_mode=packing).state(5)  # windows of one step
    order = make_order(store, window=24, state=state, packing_mode=packing)
    first = rank_steps(order, 0, 1, store, 12, start=5)  # 12 windows: anchors pruned
    again = rank_steps(order, 0, 1, store, 12, start=5)  # a new iterator from the resume step
    assert all(np.array_equal(a, b) for a, b in zip(again, first, strict=True)) and len(again) == 12
    assert order.state(5) == state
