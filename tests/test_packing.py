import numpy as np
import pytest

from pipeline.core import packing

EOS = 2


def _docs(lengths, rng):
    return [np.append(rng.integers(10, 500, n), EOS).astype(np.int32) for n in lengths]


def _pack_all(docs, seq_len):
    """Pack like the pipeline does: full records, then the remainder padded (pad id 0)."""
    stream = packing.build_stream(docs, EOS)
    tokens, starts, rest = packing.pack(stream, seq_len)
    padded = None
    if len(rest):
        padded = packing.pad_record(rest, seq_len, 0)
    return tokens, starts, rest, padded


@pytest.mark.parametrize("seq_len", [1, 2, 7, 16])
@pytest.mark.parametrize(
    "lengths_of",
    [
        lambda L: [0],
        lambda L: [1],
        lambda L: [L - 1],
        lambda L: [L],
        lambda L: [L + 1],
        lambda L: [0, 0, 0],
        lambda L: [L - 1, L, L + 1, 0, 1],
        lambda L: [3 * L + 2, 1, 5],
    ],
)
def test_every_document_token_and_eos_is_a_label_exactly_once(seq_len, lengths_of):
    rng = np.random.default_rng(seq_len)
    docs = _docs([max(0, n) for n in lengths_of(seq_len)], rng)
    tokens, starts, rest, padded = _pack_all(docs, seq_len)
    labels = [tokens[:, 1:].reshape(-1)]
    if padded is not None:
        ptokens, _, valid = padded
        labels.append(ptokens[1 : valid + 1])
    assert np.array_equal(np.concatenate(labels), np.concatenate(docs))  # tokens in == tokens out, in order
    # Consecutive records overlap by one token: record k+1 starts with record k's last token.
    for a, b in zip(tokens[:-1], tokens[1:], strict=True):
        assert a[-1] == b[0]
    assert tokens.shape[1:] == (seq_len + 1,) if len(tokens) else True
    assert tokens[0, 0] == EOS if len(tokens) else True


def test_random_documents_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(50):
        seq_len = int(rng.integers(1, 64))
        docs = _docs(rng.integers(0, 200, rng.integers(1, 20)), rng)
        tokens, _, rest, padded = _pack_all(docs, seq_len)
        total = sum(len(d) for d in docs)
        assert len(tokens) * seq_len + len(rest) == total
        assert len(rest) < seq_len


def test_worked_example_from_the_docstring():
    stream = packing.build_stream([np.array([1, 2, 3, 9]), np.array([4, 5, 9])], separator_id=9)
    tokens, starts, rest = packing.pack(stream, 4)
    assert tokens.tolist() == [[9, 1, 2, 3, 9]]
    assert rest.context == 9 and rest.labels.tolist() == [4, 5, 9]
    padded, pad_starts, valid = packing.pad_record(rest, 4, pad_id=0)
    assert padded.tolist() == [9, 4, 5, 9, 0] and valid == 3


def test_remainders_join_without_losing_tokens():
    rng = np.random.default_rng(1)
    pieces = []
    expected = []
    for _ in range(5):
        docs = _docs(rng.integers(1, 30, 3), rng)
        _, _, rest = packing.pack(packing.build_stream(docs, EOS), 16)
        pieces.append(rest)
        expected.append(rest.labels)
    joined = packing.concat_pieces(pieces, EOS)
    tokens, _, rest = packing.pack(joined, 16)
    assert np.array_equal(np.concatenate([tokens[:, 1:].reshape(-1), rest.labels]), np.concatenate(expected))
    # A joined piece starts a new segment where each remainder began.
    assert joined.starts[np.cumsum([0] + [len(p) for p in pieces[:-1]])].all()


def test_segment_ids_and_positions_follow_seqio():
    # labels of one record: doc A = [5, 6, EOS], doc B = [7, EOS], fragment of C = [8]
    stream = packing.build_stream([np.array([5, 6, EOS]), np.array([7, EOS]), np.array([8, 8, 8, EOS])], EOS)
    tokens, starts, _ = packing.pack(stream, 6)
    seg, pos = packing.segment_features(starts)
    assert tokens[0].tolist() == [EOS, 5, 6, EOS, 7, EOS, 8]
    assert seg[0].tolist() == [1, 1, 1, 2, 2, 3]
    assert pos[0].tolist() == [0, 1, 2, 0, 1, 0]
    # The next record starts inside doc C: a new segment with positions from 0.
    seg_pad, pos_pad = packing.segment_features(np.array([[True, False, True, False]]), valid_labels=3)
    assert seg_pad.tolist() == [[1, 1, 2, 0]] and pos_pad.tolist() == [[0, 1, 0, 0]]


def test_pad_record_rejects_a_full_or_empty_remainder():
    with pytest.raises(ValueError):
        packing.pad_record(packing.Piece(EOS, np.zeros(0, np.int32), np.zeros(0, bool)), 4, 0)


def test_the_remainder_holds_none_of_the_streams_memory():
    """A remainder waits for the next chunk's: as a view it would keep the whole stream alive that long."""
    stream = packing.build_stream([np.arange(1, 1000, dtype=np.int32)], separator_id=0)
    _, _, remainder = packing.pack(stream, 64)
    assert len(remainder) and not np.shares_memory(remainder.labels, stream.labels)
