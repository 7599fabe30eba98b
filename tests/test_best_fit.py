"""Best-fit packing (pipeline/core/best_fit.py) and its records; the reader's batches: test_best_fit_reader.py."""

from __future__ import annotations

import doctest
import glob
import json
import os

import numpy as np
import pytest

from pipeline.core import best_fit, best_fit_kernel, packing, provenance
from pipeline.format import framing, records

EOS = 9
PAD = 0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_docstring_example_runs():
    result = doctest.testmod(best_fit)
    assert result.attempted >= 6 and result.failed == 0


def _stream(docs, file_index=0):
    stream = packing.build_stream([np.asarray(d, np.int32) for d in docs], EOS)
    sizes = [len(d) for d in docs]
    stream.spans = provenance.document_spans(file_index, np.arange(1, len(docs) + 1), sizes)
    return stream, sizes


DOCS = ([1, 2, 9], [3, 9], [4, 5, 6, 7, 8, 9], [1, 9])


def test_literal_records_window_two():
    # Windows {A, B} and {C', D}: C's last piece opens a sequence, so its context is C's token 7.
    stream, sizes = _stream(DOCS)
    out, rest = best_fit.pack_documents(stream, sizes, seq_len=4, window=2, pad_id=PAD, final=True)
    assert out.tokens.tolist() == [[9, 4, 5, 6, 7], [9, 1, 2, 9, 0], [9, 3, 9, 0, 0], [7, 8, 9, 1, 9]]
    assert out.segment_ids.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 2, 2]]
    assert out.positions.tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 0], [0, 1, 0, 1]]
    assert out.loss_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert (out.padding, out.documents_cut, len(rest)) == (3, 1, 0)
    # Provenance covers every label position, seq_len per record, padding as PAD_FILE rows.
    assert out.spans.tolist() == [
        [0, 3, 0, 4],
        [0, 1, 0, 3], [-1, 0, 0, 1],
        [0, 2, 0, 2], [-1, 0, 0, 2],
        [0, 3, 4, 2], [0, 4, 0, 2],
    ]


def test_literal_leftover_is_the_last_short_window():
    stream, sizes = _stream(DOCS)
    out, rest = best_fit.pack_documents(stream, sizes, seq_len=4, window=3, pad_id=PAD)
    assert out.tokens.tolist() == [[9, 4, 5, 6, 7], [9, 1, 2, 9, 0], [9, 3, 9, 8, 9]]
    assert out.segment_ids.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 2, 2]]
    assert (rest.labels.tolist(), rest.lengths.tolist(), rest.contexts.tolist()) == ([1, 9], [2], [9])
    assert rest.spans.tolist() == [[0, 4, 0, 2]]
    last, nothing = best_fit.pack_items(rest, 4, 3, PAD, final=True)
    assert last.tokens.tolist() == [[9, 1, 9, 0, 0]] and last.padding == 2 and len(nothing) == 0


def _naive_best_fit(lengths, seq_len):
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rooms, where = [], [0] * len(lengths)
    for i in order:
        fits = [(room, b) for b, room in enumerate(rooms) if room >= lengths[i]]
        if fits:
            _, b = min(fits)
        else:
            b = len(rooms)
            rooms.append(seq_len)
        rooms[b] -= lengths[i]
        where[i] = b
    return where, len(rooms)


def test_assign_sequences_is_best_fit_decreasing():
    rng = np.random.default_rng(0)
    for _ in range(300):
        seq_len = int(rng.integers(1, 40))
        lengths = rng.integers(1, seq_len + 1, int(rng.integers(0, 60)))
        where, count = best_fit.assign_sequences(lengths, seq_len)
        assert (where.tolist(), count) == _naive_best_fit(lengths.tolist(), seq_len)


@pytest.mark.parametrize("compiled", [False, True])
def test_assign_sequences_of_many_items_both_loops(compiled, monkeypatch):
    # Windows above best_fit_kernel.MIN_ITEMS: numba's loop (where installed) and Python's, the same decisions.
    if compiled:
        pytest.importorskip("numba")
        monkeypatch.setattr(best_fit_kernel, "WARM_ITEMS", 0)
    rng = np.random.default_rng(1)
    for _ in range(60):
        seq_len = int(rng.choice([3, 40, 2048]))
        n = int(rng.integers(best_fit_kernel.MIN_ITEMS, 400))
        lengths = (np.minimum(seq_len, rng.geometric(min(1.0, 3 / seq_len), n)) if rng.integers(2)
                   else rng.integers(1, seq_len + 1, n))
        where, count = best_fit.assign_sequences(lengths, seq_len, compiled=compiled)
        assert (where.tolist(), count) == _naive_best_fit(lengths.tolist(), seq_len)
    if compiled:
        assert best_fit_kernel._kernel[0] is not None


def _random_docs(rng, n, seq_len):
    # Short, fitting, exactly seq_len, and several times seq_len: each ends with EOS.
    kinds = rng.integers(0, 4, n)
    sizes = np.where(kinds == 0, rng.integers(1, 4, n),
                     np.where(kinds == 1, rng.integers(1, seq_len + 1, n),
                              np.where(kinds == 2, seq_len, rng.integers(seq_len + 1, 4 * seq_len + 2, n))))
    return [np.append(rng.integers(10, 1000, s - 1), EOS).astype(np.int32) for s in sizes.tolist()]


def _check(docs, out, seq_len, window, subsets=None):
    """Every invariant of one packing of `docs` (one pack_documents with final=True)."""
    k = len(out)
    assert out.tokens.shape == (k, seq_len + 1) and out.segment_ids.shape == out.positions.shape == (k, seq_len)
    labels, seg, pos = out.tokens[:, 1:], out.segment_ids, out.positions
    # Padding: segment id 0, position 0, the pad id, counted; always after the real labels.
    pad = seg == 0
    assert int(pad.sum()) == out.padding
    assert (labels[pad] == PAD).all() and (pos[pad] == 0).all()
    assert (np.diff(pad.astype(int), axis=1) >= 0).all()
    # Every document token is a label exactly once: the spans name each label's source.
    spans = out.spans
    assert int(spans[:, 3].sum()) == k * seq_len
    covered = {i: [] for i in range(len(docs))}
    item_of = {}
    for i, d in enumerate(docs):
        if len(d) % seq_len:
            item_of[i] = len(item_of)
    for j in range(k):
        rows = provenance.cut(spans, j * seq_len, (j + 1) * seq_len)
        at = 0
        windows = set()
        for r, (file_index, line, first, n) in enumerate(rows.tolist()):
            if file_index == best_fit.PAD_FILE:
                assert pad[j, at:at + n].all()
                at += n
                continue
            doc = docs[line - 1]
            assert labels[j, at:at + n].tolist() == doc[first:first + n].tolist()
            assert pos[j, at:at + n].tolist() == list(range(n))  # one item, one segment
            assert (seg[j, at:at + n] == r + 1).all()
            if r == 0:  # the context: the separator, or the document's previous token
                assert out.tokens[j, 0] == (EOS if first == 0 else doc[first - 1])
            else:  # an item follows the previous label
                assert out.tokens[j, at] == labels[j, at - 1]
            if n < seq_len or first + n == len(doc) and len(doc) % seq_len:
                windows.add(item_of[line - 1] // window)
            covered[line - 1].append((first, n))
            at += n
        assert at == seq_len
        assert len(windows) <= 1, "items of different windows share a record"
    for i, doc in enumerate(docs):
        pieces = sorted(covered[i])
        size = len(doc)
        if size <= seq_len:  # a document that fits is never cut
            assert pieces == [(0, size)]
        else:  # full pieces at multiples of seq_len, then the rest
            full, rest = divmod(size, seq_len)
            assert pieces == [(p * seq_len, seq_len) for p in range(full)] + ([(full * seq_len, rest)] if rest else [])
    assert out.documents_cut == sum(len(d) > seq_len for d in docs)
    if subsets is not None:
        assert sum(c["padding_labels"] for c in out.counts.values()) == out.padding
        assert sum(c["documents_cut"] for c in out.counts.values()) == out.documents_cut
        for name in set(subsets):
            cut = sum(len(d) > seq_len for d, s in zip(docs, subsets, strict=True) if s == name)
            assert out.counts.get(name, {}).get("documents_cut", 0) == cut


@pytest.mark.parametrize("seq_len", [1, 2, 5, 16])
@pytest.mark.parametrize("window", [1, 2, 3, 7, 1000])
def test_invariants_over_random_documents(seq_len, window):
    rng = np.random.default_rng(seq_len * 1000 + window)
    for _ in range(8):
        docs = _random_docs(rng, int(rng.integers(0, 40)), seq_len)
        subsets = [str(s) for s in rng.choice(["a", "b", "c"], len(docs))]
        stream, sizes = _stream(docs)
        out, rest = best_fit.pack_documents(stream, sizes, seq_len, window, PAD, subsets=subsets, final=True)
        assert len(rest) == 0
        _check(docs, out, seq_len, window, subsets)
        again, _ = best_fit.pack_documents(stream, sizes, seq_len, window, PAD, subsets=subsets, final=True)
        for a, b in ((out.tokens, again.tokens), (out.segment_ids, again.segment_ids), (out.spans, again.spans)):
            assert np.array_equal(a, b)  # deterministic


@pytest.mark.parametrize("window", [1, 4, 9])
def test_no_two_sequences_of_a_window_fit_in_one(window):
    rng = np.random.default_rng(window)
    seq_len = 32
    lengths = rng.integers(1, seq_len + 1, 200)
    for a in range(0, len(lengths), window):
        where, count = best_fit.assign_sequences(lengths[a:a + window], seq_len)
        used = np.bincount(where, lengths[a:a + window], minlength=count)
        assert used.max(initial=0) <= seq_len
        for i in range(count):
            for j in range(i + 1, count):
                assert used[i] + used[j] > seq_len
        assert count >= -(-int(lengths[a:a + window].sum()) // seq_len)


def test_leftovers_carried_in_input_order_keep_every_token_once():
    # Three "chunks" packed with their leftovers carried on, then the leftovers packed last.
    rng = np.random.default_rng(7)
    seq_len, window = 8, 5
    chunks = [_random_docs(rng, n, seq_len) for n in (12, 3, 9)]
    docs = [d for c in chunks for d in c]
    outs, leftovers, line = [], [], 1
    for chunk in chunks:
        stream = packing.build_stream(chunk, EOS)
        sizes = [len(d) for d in chunk]
        stream.spans = provenance.document_spans(0, np.arange(line, line + len(chunk)), sizes)
        line += len(chunk)
        out, rest = best_fit.pack_documents(stream, sizes, seq_len, window, PAD)
        assert len(rest) < window
        outs.append(out)
        leftovers.append(rest)
    last, nothing = best_fit.pack_items(best_fit.concat_items(leftovers), seq_len, window, PAD, final=True)
    assert len(nothing) == 0
    whole = best_fit.concat_packed([*outs, last], seq_len)
    labels = whole.tokens[:, 1:][whole.segment_ids > 0]
    assert sorted(labels.tolist()) == sorted(np.concatenate(docs).tolist())
    assert int(whole.spans[whole.spans[:, 0] >= 0, 3].sum()) == sum(len(d) for d in docs)


def test_memory_is_bounded_by_the_window():
    # A window's sequences: at most `window` items, so at most `window` sequences per window.
    rng = np.random.default_rng(3)
    seq_len, window = 64, 10
    docs = _random_docs(rng, 300, seq_len)
    stream, sizes = _stream(docs)
    whole, items = best_fit.split_documents(stream, sizes, seq_len)
    out, _ = best_fit.pack_items(items, seq_len, window, PAD, final=True)
    assert len(out) <= len(items) and len(out) >= -(-len(items) // window)
    per_window = [best_fit.pack_window(items.take(a, min(a + window, len(items))), seq_len, PAD)
                  for a in range(0, len(items), window)]
    assert sum(len(p) for p in per_window) == len(out)
    assert max(len(p) for p in per_window) <= window


def test_refuses_bad_arguments():
    stream, sizes = _stream(DOCS)
    with pytest.raises(ValueError, match="add up"):
        best_fit.pack_documents(stream, sizes[:-1], 4, 2, PAD)
    with pytest.raises(ValueError, match="window"):
        best_fit.pack_documents(stream, sizes, 4, 0, PAD)
    with pytest.raises(ValueError, match="item lengths"):
        best_fit.assign_sequences(np.array([5]), 4)


def test_empty_input():
    stream, sizes = _stream([])
    out, rest = best_fit.pack_documents(stream, sizes, 4, 2, PAD, final=True)
    assert len(out) == 0 and len(rest) == 0 and out.tokens.shape == (0, 5) and len(out.spans) == 0


# --- records -------------------------------------------------------------------------------------


def test_best_fit_records_are_the_reference_encoding_and_one_size():
    rng = np.random.default_rng(0)
    seq_len = 16
    docs = _random_docs(rng, 30, seq_len)
    stream, sizes = _stream(docs)
    out, _ = best_fit.pack_documents(stream, sizes, seq_len, 4, PAD, final=True)
    block = framing.serialize_packed(out.tokens, out.segment_ids, out.positions, dtype=records.UINT16)
    assert len(block) == len(out)
    for i in range(len(out)):
        reference = records.serialize_example(out.tokens[i], out.segment_ids[i], out.positions[i], None,
                                              records.UINT16)
        assert block.payload(i) == reference
    assert len(set(np.diff(np.concatenate([[0], block.ends])).tolist())) == 1
    assert int(block.ends[0]) == framing.record_bytes(seq_len, records.UINT16, True)



@pytest.mark.parametrize("dtype", [records.UINT16, np.dtype("<i4")])
def test_records_packed_in_the_token_dtype_are_the_same_records(dtype):
    # The job packs straight into its token dtype, and segment ids and positions come out narrow:
    # the values, and the bytes written, are those of the int32 packing.
    rng = np.random.default_rng(1)
    docs = _random_docs(rng, 60, 16)
    stream, sizes = _stream(docs)
    wide, _ = best_fit.pack_documents(stream, sizes, 16, 5, PAD, final=True)
    narrow, _ = best_fit.pack_documents(stream, sizes, 16, 5, PAD, final=True, dtype=dtype)
    assert narrow.tokens.dtype == dtype and narrow.segment_ids.dtype == packing.segment_dtype(16) == np.uint16
    for a, b in ((wide.tokens, narrow.tokens), (wide.segment_ids, narrow.segment_ids),
                 (wide.positions, narrow.positions)):
        assert a.tolist() == b.tolist()
    reference = [records.serialize_example(wide.tokens[i], wide.segment_ids[i].astype(np.int64),
                                           wide.positions[i].astype(np.int64), None, dtype) for i in range(len(wide))]
    block = framing.serialize_packed(narrow.tokens, narrow.segment_ids, narrow.positions, dtype=dtype)
    assert [block.payload(i) for i in range(len(block))] == reference
    assert packing.segment_dtype(1 << 16) == np.int32  # segment ids reach seq_len


@pytest.mark.parametrize("seq_len", [5, 16, 64])
def test_records_of_short_and_long_items_are_built_alike(seq_len, monkeypatch):
    # Records are built from one view per item when items are long on average, with one gather
    # when they are short: both ways give the same records.
    rng = np.random.default_rng(seq_len)
    docs = _random_docs(rng, 80, seq_len)
    stream, sizes = _stream(docs)
    built = []
    for view_tokens in (0, 1 << 30):
        monkeypatch.setattr(best_fit, "_VIEW_TOKENS", view_tokens)
        out, _ = best_fit.pack_documents(stream, sizes, seq_len, 7, PAD, final=True)
        built.append((out.tokens.tolist(), out.segment_ids.tolist(), out.positions.tolist(), out.spans.tolist()))
    assert built[0] == built[1]
    _check(docs, out, seq_len, 7, None)

def test_feature_spec_and_packing_mode():
    spec = records.feature_spec(8, records.UINT16, False, records.BEST_FIT)
    assert set(spec) == {records.TOKENS, records.SEGMENT_IDS, records.POSITIONS}
    assert records.feature_spec(8, records.UINT16, True) == records.feature_spec(8, records.UINT16, True, "concat")
    assert records.packing_mode({"packing": {}}) == records.CONCAT
    assert records.packing_mode({"packing": {"mode": "best_fit"}, "features": spec}) == records.BEST_FIT
    with pytest.raises(ValueError, match="segment_ids"):
        records.packing_mode({"packing": {"mode": "best_fit"}, "features": {records.TOKENS: {}}})
    with pytest.raises(ValueError, match="understands"):
        records.packing_mode({"packing": {"mode": "zigzag"}})
    with pytest.raises(ValueError, match="choose from"):
        records.feature_spec(8, records.UINT16, True, "zigzag")


# --- padding on real-size length distributions -----------------------------------------------------


@pytest.fixture(scope="module")
def sample_lengths():
    """Document lengths (EOS included) of the bundled sample corpus, tokenized with its model, per file."""
    import sentencepiece as spm
    import zstandard

    sp = spm.SentencePieceProcessor(model_file=os.path.join(REPO, "tokenizers/sample/sample.model"))
    per_file = []
    for path in sorted(glob.glob(os.path.join(REPO, "sample_data/pile/train/*.jsonl.zst"))):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        texts = [json.loads(line)["text"] for line in data.split(b"\n") if line.strip()]
        per_file.append(np.array([len(ids) + 1 for ids in sp.encode(texts)], np.int64))
    return per_file


def padding_fraction(lengths: np.ndarray, seq_len: int, window: int) -> tuple[float, int]:
    """(padding / label positions, records) of one work item's documents packed by best fit."""
    full, rest = lengths // seq_len, lengths % seq_len
    items = rest[rest > 0]
    sequences = sum(best_fit.assign_sequences(items[a:a + window], seq_len)[1] for a in range(0, len(items), window))
    count = sequences + int(full.sum())
    return (sequences * seq_len - int(items.sum())) / (count * seq_len), count


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [2048, 4096])
def test_padding_at_the_default_window_is_at_most_one_percent(sample_lengths, seq_len):
    # Each input file of the sample is one work item (about one 4 MB chunk).
    pads = []
    for window in (16, 64, 256, best_fit.DEFAULT_WINDOW):
        padding = labels = 0
        for lengths in sample_lengths:
            fraction, count = padding_fraction(lengths, seq_len, window)
            padding += fraction * count * seq_len
            labels += count * seq_len
        pads.append(padding / labels)
    assert pads[-1] <= 0.01, pads
    assert pads == sorted(pads, reverse=True), pads  # padding falls as the window grows
    # The whole packing of one file agrees with the arithmetic above.
    lengths = sample_lengths[0]
    docs = [np.full(n, 5, np.int32) for n in lengths.tolist()]
    out, _ = best_fit.pack_documents(packing.build_stream(docs, EOS), lengths, seq_len, best_fit.DEFAULT_WINDOW,
                                     PAD, final=True)
    fraction, count = padding_fraction(lengths, seq_len, best_fit.DEFAULT_WINDOW)
    assert len(out) == count and out.padding == round(fraction * count * seq_len)
    assert out.documents_cut == int((lengths > seq_len).sum())
