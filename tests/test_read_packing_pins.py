"""Read-time packing's edges and fixed decisions, pinned by literal values (a mutation elsewhere fails here).

The consistency tests (tests/test_read_packing.py) hold for any order and any cut: these pin which
one. Layouts refused when the documents do not cover them, and keys kept apart from documents; a
leftover fragment joined whole; the schedule's keys; the dealing of a window's columns for a seed
(a store, a mixture of stores); a store of more than 65,536 documents (a walk and a packing window
across a 2**16-position block of the epoch's order); takes that start exactly at a document
boundary or end exactly at an epoch's end.
"""

from __future__ import annotations

import numpy as np
import pytest
from store_fakes import FakeDocStore, FakeStore, doc_tokens, filled

from pipeline.core import read_packing as rp
from pipeline.format.mixture import Mixture, MixtureSource
from pipeline.reader.engine.doc_mixture import StoreMixtureOrder
from pipeline.reader.engine.doc_plan import column_picks, parse_schedule
from pipeline.reader.engine.doc_reader import StoreSettings
from pipeline.reader.engine.doc_stream import BestFitStream, ConcatStream, DocumentOrder

# -- layouts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [([0, 1], [0, 1], [0, 10], [3, 6], 0, 3, 4),  # a hole: labels 3..9
                                  ([7], [7], [2], [5], 0, 1, 4)])  # the first document starts after label 0
def test_concat_layout_refuses_documents_that_do_not_cover_its_labels(args):
    with pytest.raises(ValueError, match="do not cover"):
        rp.concat_layout(*args)


def test_a_layout_holds_the_documents_and_the_keys_given_each_in_its_place():
    lay = rp.concat_layout([5, 9], [100, 200], [0, 3], [3, 6], 0, 2, 4)
    assert lay.doc.tolist() == [5, 9, 9] and lay.key.tolist() == [100, 200, 200]
    assert lay.ctx_doc.tolist() == [rp.SEPARATOR, 9] and lay.ctx_tok.tolist() == [0, 0]
    packed = rp.best_fit_layout([5, 9], [100, 200], [0, 0], [3, 6], 4)
    assert packed.doc.tolist() == [9, 5, 9] and packed.key.tolist() == [200, 100, 200]


def test_a_document_cut_into_pieces_comes_back_as_one_fragment_and_is_cut_again_at_the_new_length():
    lay = rp.best_fit_layout([3], [30], [0], [74], 15)
    assert lay.length.tolist() == [15, 15, 15, 15, 14]
    assert [x.tolist() for x in rp.leftover(lay, 0)] == [[3], [30], [0], [74]]  # one fragment, not five
    assert [x.tolist() for x in rp.leftover(lay, 2)] == [[3], [30], [30], [44]]
    again = rp.best_fit_layout(*rp.leftover(lay, 2), 20)
    assert again.start.tolist() == [30, 50, 70] and again.length.tolist() == [20, 20, 4]
    assert again.ctx_doc.tolist() == [3, 3, 3] and again.ctx_tok.tolist() == [29, 49, 69]


def test_a_leftover_is_in_input_order_and_joins_only_one_documents_adjacent_rows():
    # The docstring's example: sequences B[0:4], A, B[4:6]: the rows are not in input (key) order.
    lay = rp.best_fit_layout([0, 1], [0, 1], [0, 0], [3, 6], 4)
    assert lay.key.tolist() == [1, 0, 1]
    assert [x.tolist() for x in rp.leftover(lay, 0)] == [[0, 1], [0, 1], [0, 0], [3, 6]]
    assert [x.tolist() for x in rp.leftover(lay, 1)] == [[0, 1], [0, 1], [0, 4], [3, 2]]
    # Adjacent token ranges of another document, or of the same document under another key, stay apart.
    for docs, keys in (([3, 4], [30, 40]), ([3, 3], [30, 31])):
        lay = rp.best_fit_layout(docs, keys, [0, 5], [5, 10], 4)
        assert [x.tolist() for x in rp.leftover(lay, 0)] == [docs, keys, [0, 5], [5, 10]]


@pytest.mark.parametrize("entry,message", [({"step": 9, "seqlen": 48}, "unknown key 'seqlen'"),
                                           ({"step": 9, "global_batch": 4}, "unknown key 'global_batch'"),
                                           ({"seq_len": 48}, "no 'step'")])
def test_parse_schedule_names_an_unknown_or_missing_key(entry, message):
    with pytest.raises(ValueError, match=message):
        parse_schedule(8, 32, [entry])


# -- the dealing of a window's columns, for a seed ------------------------------------------------


def test_the_columns_dealt_to_a_windows_batches_for_a_seed_do_not_change():
    # Columns 3..6 of a window of 5 steps starting at step 12, seed 7: which sequence of each goes to step s.
    assert column_picks(7, True, 12, 5, 3, 4).tolist() == [[4, 1, 0, 2, 3], [1, 4, 3, 0, 2], [2, 0, 4, 1, 3],
                                                           [0, 2, 3, 1, 4]]
    assert column_picks(None, False, 12, 3, 0, 2).tolist() == [[0, 1, 2], [0, 1, 2]]


def test_a_mixture_of_stores_deals_its_sources_for_a_seed_as_before():
    a = FakeDocStore(np.random.default_rng(1).integers(1, 200, 60))
    b = FakeDocStore(np.random.default_rng(2).integers(1, 200, 40))
    mix = Mixture((MixtureSource("a", "a", 0.7), MixtureSource("b", "b", 0.3)), ((0, (0.7, 0.3)),))
    order = StoreMixtureOrder(mix, [a, b], StoreSettings(global_batch_size=4, seq_len=16, seed=9, shuffle_buffer=12))
    got = []
    for window in order.windows(0):
        firsts = [lay.select(np.arange(lay.count)).doc[:3].tolist() for lay in window.layouts]
        got.append((window.first, window.source.tolist(), window.index.tolist(), firsts))
        if len(got) == 2:
            break
    assert got == [(0, [0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0], [0, 3, 2, 8, 2, 0, 4, 7, 1, 1, 5, 6],
                    [[57, 57, 34], [37, 37, 37]]),
                   (3, [1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0], [0, 2, 5, 3, 1, 4, 6, 2, 0, 3, 1, 7],
                    [[23, 23, 23], [37, 37, 17]])]


# -- a store of more than 65,536 documents -------------------------------------------------------

BIG = np.random.default_rng(11).integers(1, 4, 70_000)  # 70,000 documents of 1-3 tokens


def test_a_concat_walk_across_a_block_of_the_epochs_order_gives_the_orders_documents():
    store = FakeStore(BIG)
    order = DocumentOrder(len(BIG), 13, True)
    before = int(BIG[order.docs(0, np.arange(65_500))].sum())  # labels before position 65,500
    stream = ConcatStream(store.lengths, order, int(BIG.sum()), None, None)
    stream.take(1, before)  # the cursor at position 65,500
    assert stream.cursor()["position"] == 65_500 and stream.cursor()["offset"] == 0
    n = int(BIG[order.docs(0, np.arange(65_500, 65_600))].sum())  # 100 documents across position 65,536
    labels = filled(stream.take(1, n), store)["tokens"][0, 1:]
    expected = np.concatenate([doc_tokens(int(d), int(BIG[d])) for d in order.docs(0, np.arange(65_500, 65_600))])
    assert labels.tolist() == expected.tolist()


def test_a_best_fit_window_across_a_block_of_the_epochs_order_packs_the_orders_documents():
    store = FakeStore(BIG)
    order = DocumentOrder(len(BIG), 13, True)
    stream = BestFitStream(store.lengths, order, 1000, None, {"epoch": 0, "window": 65, "chain": []})
    parts = []
    while stream.cursor()["window"] == 65:  # window 65: positions 65,000..65,999, a sequence at a time
        taken = stream.take(1, 8)
        parts.append(taken.select([0]))
    lay = rp.concat_layouts(parts)
    assert sorted(lay.doc.tolist()) == sorted(order.docs(0, np.arange(65_000, 66_000)).tolist())
    assert sorted(lay.key.tolist()) == list(range(65_000, 66_000))  # each fragment keyed by its position
    assert np.array_equal(BIG[lay.doc], lay.length)  # 1-3 tokens: every document whole


# -- takes at a boundary -------------------------------------------------------------------------

FIVE = np.array([10, 14, 17, 2, 18])  # seed 7 reads epoch 0 as documents 3, 4, 2, 1, 0; epoch 1 as 3, 0, 1, 4, 2


def test_the_document_orders_of_seed_7_are_the_pinned_ones():
    order = DocumentOrder(5, 7, True)
    assert order.docs(0, np.arange(5)).tolist() == [3, 4, 2, 1, 0]
    assert order.docs(1, np.arange(5)).tolist() == [3, 0, 1, 4, 2]


def test_a_take_starting_exactly_at_a_document_and_ending_in_the_last_one_walked():
    stream = ConcatStream(FakeStore(FIVE).lengths, DocumentOrder(5, 7, True), int(FIVE.sum()), 1)
    for count, seq_len in [(3, 5), (1, 3), (3, 5), (2, 3), (3, 4)]:  # 51 labels: documents 3, 4, 2, 1
        stream.take(count, seq_len)
    assert stream.cursor() == {"label": 51, "epoch": 0, "position": 4, "offset": 0}
    lay = stream.take(1, 8).select([0])
    assert (lay.doc.tolist(), lay.start.tolist(), lay.length.tolist()) == ([0], [0], [8])  # document 0's first 8
    assert (lay.ctx_doc.tolist(), lay.ctx_tok.tolist()) == ([1], [13])  # after document 1's last token
    assert stream.cursor() == {"label": 59, "epoch": 0, "position": 4, "offset": 8}


def test_a_take_ending_exactly_at_an_epochs_end_gives_the_next_its_last_token_as_context():
    stream = ConcatStream(FakeStore(FIVE).lengths, DocumentOrder(5, 7, True), int(FIVE.sum()), None)
    stream.take(1, 61)  # all of epoch 0
    assert stream.cursor() == {"label": 61, "epoch": 1, "position": 0, "offset": 0}
    lay = stream.take(1, 4).select([0])
    assert (lay.ctx_doc.tolist(), lay.ctx_tok.tolist()) == ([0], [9])  # epoch 0's last document, its last token
    assert (lay.doc.tolist(), lay.start.tolist(), lay.length.tolist()) == ([3, 0], [0, 0], [2, 2])
    assert stream.cursor() == {"label": 65, "epoch": 1, "position": 1, "offset": 2}


def _stream_tokens(order: DocumentOrder, lengths: np.ndarray, epochs: int) -> np.ndarray:
    """The concat stream's labels, epoch after epoch, from the documents' own tokens."""
    return np.concatenate([doc_tokens(int(d), int(lengths[d])) for e in range(epochs)
                           for d in order.docs(e, np.arange(len(lengths)))])


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_sequence_of_every_take_is_the_streams_labels_after_the_label_before(shuffle):
    """Context and labels of each sequence, take after take (seq_len changing): labels [lo, hi) after label lo - 1."""
    store = FakeStore(FIVE)
    order = DocumentOrder(5, 7, shuffle)
    expected = _stream_tokens(order, FIVE, 3)
    stream = ConcatStream(store.lengths, order, int(FIVE.sum()), None)
    lo = 0
    for count, seq_len in [(3, 5), (1, 3), (3, 5), (2, 3), (3, 4), (1, 8), (2, 1), (1, 17), (4, 6)]:
        tokens = filled(stream.take(count, seq_len), store)["tokens"]
        for row in tokens:
            context = expected[lo - 1] if lo else 2  # the separator (EOS) before the run's first label
            assert row.tolist() == [context, *expected[lo : lo + seq_len].tolist()], (lo, seq_len)
            lo += seq_len


def test_a_take_starting_at_label_1_on_a_document_boundary_has_label_0_as_its_context():
    store = FakeStore(np.array([1, 4, 3]))
    stream = ConcatStream(store.lengths, DocumentOrder(3, None, False), 8, None)
    stream.take(1, 1)  # document 0, its one token
    assert stream.cursor() == {"label": 1, "epoch": 0, "position": 1, "offset": 0}
    tokens = filled(stream.take(1, 3), store)["tokens"][0]
    assert tokens.tolist() == [doc_tokens(0, 1)[0], *doc_tokens(1, 4)[:3].tolist()]


def test_a_take_ending_exactly_at_the_end_of_a_finite_stream_leaves_the_cursor_at_the_end():
    stream = ConcatStream(FakeStore(FIVE).lengths, DocumentOrder(5, 7, True), int(FIVE.sum()), 1)
    run = stream.take(1, 61)  # all of the one epoch, not a label more
    assert run.real() == 1 and run.end == 61
    assert stream.cursor() == {"label": 61, "epoch": 1, "position": 0, "offset": 0}
    assert stream.take(2, 4).real() == 0  # padding from there on
