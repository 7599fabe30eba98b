"""Every argument of both readers is checked before anything is read or allocated, the error naming it.

One validation (pipeline/reader/engine/request.py, `StoreSettings`, `parse_schedule`) serves
`tfdata.make_dataset` and `pipeline.pytorch.StoreDataset`: a float, a string or a bool where a
count belongs, a size past its physical limit, a schedule that is not a list of entries, an entry
with an unknown or missing key. The checks run before the store is opened, so a directory holding
only a store's format marker reaches them; the reader over stores the job wrote: test_docstore.py.
"""

from __future__ import annotations

import json

import pytest

from pipeline import tfdata
from pipeline.format.megatron import FORMAT
from pipeline.pytorch import StoreDataset
from pipeline.reader.engine.doc_plan import parse_schedule
from pipeline.reader.engine.request import MAX_SEQ_LEN, MAX_STEP_LABELS


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> str:
    """A directory whose manifest says "document store": the readers take the store's path and check the rest."""
    out = tmp_path_factory.mktemp("marked")
    (out / "manifest.json").write_text(json.dumps({"format": FORMAT}))
    return str(out)


BASE = {"global_batch_size": 8, "seq_len": 16, "seed": 1}

# (argument, value, what the error must say)
BAD = [
    ("seq_len", 2**31, "seq_len 2147483648 is outside"),
    ("seq_len", 64.7, "seq_len 64.7: must be an integer"),
    ("seq_len", "64", "seq_len '64': must be an integer"),
    ("seq_len", True, "seq_len True: must be an integer"),
    ("seq_len", 0, "seq_len 0 is outside"),
    ("global_batch_size", 8.0, "global_batch_size 8.0: must be an integer"),
    ("global_batch_size", 2**40, "global_batch_size 1099511627776 is outside"),
    ("global_batch_size", 1 << 27, "global_batch_size 134217728 x seq_len 16"),
    ("seed", "1", "seed '1': must be an integer"),
    ("seed", 2**64, "seed 18446744073709551616 is outside"),
    ("shuffle", "no", "shuffle 'no': must be True or False"),
    ("verify", 1, "verify 1: must be True or False"),
    ("epoch", -1, "epoch -1 is outside"),
    ("start_step", 2**40, "start_step 1099511627776 is outside"),
    ("num_epochs", 0, "num_epochs 0 is outside"),
    ("num_steps", "3", "num_steps '3': must be an integer"),
    ("shuffle_buffer", 2**40, "shuffle_buffer 1099511627776 is outside"),
    ("shuffle_buffer", 2**28, "shuffle_buffer 268435456 x seq_len 16"),
    ("pack_window", 0, "pack_window 0 is outside"),
    ("pack_window", 2**30, "pack_window 1073741824 is outside"),
    ("features", "segment_ids", "features 'segment_ids': a list of names"),
    ("schedule", {"step": 9, "seq_len": 48}, "schedule {'step': 9, 'seq_len': 48}: a list of entries"),
    ("schedule", [[9, 8]], r"schedule entry 0 \[9, 8\]: a dict"),
    ("schedule", [{"step": 9, "seqlen": 48}], "unknown key 'seqlen'"),
    ("schedule", [{"step": 9, "global_batch": 4}], "unknown key 'global_batch'"),
    ("schedule", [{"seq_len": 48}], "no 'step'"),
    ("schedule", [{"step": "9", "seq_len": 48}], "schedule entry 0: step '9': must be an integer"),
    ("schedule", [{"step": 9, "seq_len": 2**31}], "schedule entry 0: seq_len 2147483648 is outside"),
    ("schedule", [{"step": 9, "seq_len": 48.5}], "schedule entry 0: seq_len 48.5"),
    ("schedule", [{"step": 9, "global_batch_size": 2**20, "seq_len": 2**11}], "schedule entry 0: global_batch_size "
     "1048576 x seq_len 2048"),
    ("state", [1, 2], "state list: a dict"),
]


@pytest.mark.parametrize("name,value,message", BAD, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD])
def test_the_pytorch_reader_refuses_the_argument_naming_it(marked, name, value, message):
    with pytest.raises(ValueError, match=message):
        StoreDataset(marked, **{**BASE, name: value})


@pytest.mark.parametrize("name,value,message", BAD, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD])
def test_make_dataset_refuses_the_argument_naming_it(marked, name, value, message):
    with pytest.raises(ValueError, match=message):
        tfdata.make_dataset(marked, **{**BASE, name: value})


def test_a_pack_window_of_0_is_refused_by_both_readers_not_taken_as_the_default(marked):
    with pytest.raises(ValueError, match="pack_window 0 is outside"):
        tfdata.make_dataset(marked, packing="best_fit", pack_window=0, **BASE)
    with pytest.raises(ValueError, match="pack_window 0 is outside"):
        StoreDataset(marked, packing="best_fit", pack_window=0, **BASE)


@pytest.mark.parametrize("kw,message", [
    ({"dp_rank": "0", "dp_size": 2}, "dp_rank '0': must be an integer"),
    ({"dp_rank": 2, "dp_size": 2}, "dp_rank 2 is outside"),
    ({"dp_size": 0}, "dp_size 0 is outside"),
    ({"read_ahead": 0}, "read_ahead 0 is outside"),
])
def test_the_pytorch_reader_refuses_ranks_and_read_ahead(marked, kw, message):
    with pytest.raises(ValueError, match=message):
        StoreDataset(marked, **{**BASE, **kw})


@pytest.mark.parametrize("kw,message", [
    ({"batch_size": "8"}, "batch_size '8': must be an integer"),
    ({"global_batch_size": 8.0}, "global_batch_size 8.0: must be an integer"),
    ({"global_batch_size": 8, "num_parallel_reads": 0}, "num_parallel_reads 0 is outside"),
    ({"global_batch_size": 8, "read_buffer_bytes": 2**40}, "read_buffer_bytes 1099511627776 is outside"),
    ({"global_batch_size": 8, "keras": "yes"}, "keras 'yes': must be True or False"),
    ({"global_batch_size": 8, "dp_rank": 1.0, "dp_size": 2}, "dp_rank 1.0: must be an integer"),
])
def test_make_dataset_refuses_its_common_arguments_before_reading_the_manifest(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        tfdata.make_dataset(str(tmp_path / "no-such-output"), seed=1, **kw)


def test_the_limits_are_the_documented_ones():
    assert MAX_SEQ_LEN == 1 << 20 and MAX_STEP_LABELS == 1 << 30
    assert parse_schedule(1, MAX_SEQ_LEN)[0].seq_len == MAX_SEQ_LEN  # the limit itself is taken
    assert parse_schedule(MAX_STEP_LABELS // 2048, 2048)[0].global_batch == 1 << 19
