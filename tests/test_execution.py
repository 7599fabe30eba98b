"""How a job spreads over workers: each profile's plan (fan-out, tokenizer threads), files balanced per worker."""

import doctest
import json
import os
import time

import pytest
from corpus_helpers import write_lines

from pipeline.beam import read
from pipeline.beam.options import pipeline_options
from pipeline.beam.runners import work_items
from pipeline.beam.runners.direct import claims
from pipeline.beam.runners.direct import read as direct_read
from pipeline.beam.runners.direct.profile import ENCODE_BATCH_BYTES
from pipeline.beam.runners.direct.runner import running_mode
from pipeline.beam.runners.registry import profile_for
from pipeline.beam.runners.work_items import balance, share_files
from pipeline.io import inputs
from pipeline.io.frames import Stripe, iter_unit_chunks

FILES = [f"f{i}" for i in range(8)]


def plan_execution(runner: str, workers: int | None, files: list[str], fan_out: str = "auto",
                   encode_threads: int | None = None):
    """The plan of `runner`'s profile with --direct_num_workers `workers` (None: not given)."""
    flags = ["--runner", runner] + (["--direct_num_workers", str(workers)] if workers is not None else [])
    options = pipeline_options(flags)
    return profile_for(options).plan(options, files, fan_out, encode_threads)


def test_the_examples_in_the_docstrings_hold():
    results = [doctest.testmod(module) for module in (work_items, direct_read)]
    assert sum(r.attempted for r in results) >= 3 and sum(r.failed for r in results) == 0


def test_direct_runner_reads_on_the_workers_without_a_fan_out():
    for files in (FILES, FILES[:1]):
        plan = plan_execution("DirectRunner", 2, files)
        assert not plan.fan_out and plan.share and plan.workers == 2
    assert plan.encode_threads == max(1, (os.cpu_count() or 1) // 2)
    assert plan.encode_batch_bytes == ENCODE_BATCH_BYTES  # chunks tokenized several per call


@pytest.mark.parametrize(("sizes", "workers", "read_share", "want"), [
    ([100], 2, 0.05, [2]),  # one file: both workers read it, each tokenizes half
    ([100, 100], 2, 0.05, [1, 1]),  # balanced whole
    ([100, 100, 100], 2, 0.05, [2, 1, 1]),  # 3 on 2: split one
    ([100, 50], 2, 0.05, [2, 2]),
    ([100, 95], 2, 0.05, [1, 1]),  # within what a stripe's extra read costs
    ([100, 95], 2, 0.01, [2, 2]),  # SentencePiece: reading is cheaper next to tokenizing
    ([100] * 8, 2, 0.05, [1] * 8),
    ([300, 100, 100], 4, 0.05, [4, 2, 2]),
    ([100], 1, 0.05, [1]),
])
def test_share_files_splits_files_only_when_it_shortens_the_run(sizes, workers, read_share, want):
    assert share_files(sizes, workers, read_share) == want


def test_share_files_is_quick_with_many_files():
    start = time.monotonic()
    assert share_files(list(range(1, 2001)), 16, 0.05) == [1] * 2000
    assert share_files([10_000] + [1] * 1999, 16, 0.05)[0] > 1
    assert time.monotonic() - start < 5


def test_stripes_of_a_file_are_its_chunks_once_each(tmp_path):
    lines = [json.dumps({"text": f"line {i} " * (i % 50), "meta": {"pile_set_name": "Pile-CC"}}).encode()
             for i in range(3000)]
    path = write_lines(str(tmp_path / "in.jsonl.zst"), lines)
    whole = list(iter_unit_chunks(path, 0, None, 4096, 1 << 20))
    for count in (2, 3):
        parts = [c for k in range(count) for c in iter_unit_chunks(path, 0, Stripe(k, count), 4096, 1 << 20)]
        assert sorted(parts, key=lambda c: c.chunk_index) == whole and len(whole) > 10


def test_zero_direct_workers_means_one_per_core():
    assert plan_execution("DirectRunner", 0, FILES).workers == (os.cpu_count() or 1)


def test_a_distributed_runner_fans_chunks_out():
    dataflow = plan_execution("DataflowRunner", None, FILES * 10)
    assert dataflow.fan_out and not dataflow.share and dataflow.encode_threads == 1  # one SDK process per vCPU
    assert dataflow.encode_batch_bytes == 0  # a chunk per call: its many harness threads would each hold a batch


def test_explicit_choices_win():
    no = plan_execution("DirectRunner", 2, FILES[:1], "no")
    assert no.fan_out is False and no.share is False
    assert plan_execution("DirectRunner", 1, FILES, "yes").fan_out is True
    assert plan_execution("DirectRunner", 1, FILES, encode_threads=3).encode_threads == 3
    with pytest.raises(ValueError, match="--fan_out"):
        plan_execution("DirectRunner", 1, FILES, "sometimes")


def test_balance_puts_biggest_files_on_least_loaded_workers():
    sizes = [10, 9, 8, 7, 6, 5, 1, 1]
    slots = balance(sizes, 3)
    loads = [sum(s for s, k in zip(sizes, slots, strict=True) if k == w) for w in range(3)]
    assert sorted(loads) == [15, 16, 16] and balance(sizes, 3) == slots
    assert balance([5, 5], 4) == [0, 1] and balance([], 2) == []


def test_worker_threads_while_the_gil_is_not_the_limit():
    # The tokenizers release the GIL; the Python around them does not (GIL_SHARE of a worker's time).
    assert running_mode(2, "sentencepiece") == "multi_threading"
    assert running_mode(8, "sentencepiece") == "multi_threading"
    assert running_mode(2, "gigatoken") == "multi_threading"
    assert running_mode(4, "gigatoken") == "multi_processing"
    assert running_mode(64, "sentencepiece") == "multi_processing"
    assert running_mode(2, "tokenizers") == "multi_threading"  # its reference runs through encode_batch
    assert running_mode(2, "tiktoken") == running_mode(2, "tokenizers_batch") == "multi_threading"


def test_the_stripes_of_a_file_go_to_different_workers():
    # Two stripes of a shared file on two workers: LPT alone puts both on the worker with less to do.
    sizes, apart = [10, 10, 10, 6, 6], [None, None, None, 7, 7]
    assert balance(sizes, 2) == [0, 1, 0, 1, 1]
    assert balance(sizes, 2, apart) == [0, 1, 0, 1, 0]
    assert balance([5, 5, 5], 2, ["f", "f", "f"]) == [0, 1, 0]  # more stripes than workers: shared as even as can be


def test_threads_take_work_items_from_one_queue_then_share_the_largest_file():
    units = [(0, "a", None), (1, "b", Stripe(0, 2, "run-q")), (1, "b", Stripe(1, 2, "run-q")), (2, "c", None)]
    by_slot = direct_read.on_queue(units, [5.0, 9.0, 9.0, 7.0], 2, "run-q")
    queue = [u for w, u in by_slot if w == 0 and len(u) > 3]
    assert [u[0] for u in queue] == [2, 0]  # largest first
    assert [u for w, u in by_slot if w == 1 and len(u) > 3] == queue  # every worker has the queue
    assert {w: u[2].index for w, u in by_slot if len(u) == 3} == {0: 0, 1: 1}  # one stripe each
    # Worker 0 takes the first item; worker 1, arriving while it reads it, the second; then each its stripe.
    mine = {w: [u for v, u in by_slot if v == w] for w in (0, 1)}
    first, second = direct_read.worker_order(mine[0]), direct_read.worker_order(mine[1])
    assert next(first)[0] == 2 and next(second)[0] == 0
    assert [u[0] for u in second] == [1] and [u[0] for u in first] == [1]


def test_small_queued_items_are_taken_in_groups_that_shrink_toward_the_end():
    units = [(i, f"f{i:02d}.jsonl.zst", None) for i in range(20)]
    by_slot = direct_read.on_queue(units, [1e6] * 20, 2, "run-g", batch_bytes=4 << 20)
    queue = [u for w, u in by_slot if w == 0]
    groups = [u[3].group for u in queue]
    sizes = [groups.count(g) for g in sorted(set(groups))]
    # Each item's text is guessed at 3 MB: two to a group of at most 2 batches, one each at the end.
    assert sizes[0] == 2 and sizes[-4:] == [1] * 4 and sizes == sorted(sizes, reverse=True)
    assert [u[3].ends_group for u in queue] == [k + 1 == len(groups) or groups[k + 1] != g
                                                for k, g in enumerate(groups)]
    # The worker first to take a group reads all of it; the other goes on with the next group.
    mine = {w: [u for v, u in by_slot if v == w] for w in (0, 1)}
    first, second = direct_read.worker_order(mine[0]), direct_read.worker_order(mine[1])
    assert [next(first)[0], next(first)[0], next(second)[0]] == [0, 1, 2]
    rest = list(first) + list(second)
    assert sorted(u[0] for u in rest) == list(range(3, 20))
    # Without batched tokenizer calls every item is a group of its own, as is an item of a plain file
    # that alone fills the group.
    alone = direct_read.on_queue(units, [1e6] * 20, 2, "run-g0")
    assert all(u[3].ends_group and u[3].group == u[3].position for _, u in alone)
    # The text of a compressed file is guessed from its name, a presigned URL's query aside.
    assert work_items.text_bytes_guess("https://h/a.jsonl.zst?X-Amz-Signature=1", 10) == 30
    assert work_items.text_bytes_guess("s3://b/a.jsonl", 10) == 10
    plain = direct_read.on_queue([(0, "a.jsonl", None), (1, "b.jsonl", None)], [9e6, 9e6], 2, "run-g1", 4 << 20)
    assert [u[3].group for w, u in plain if w == 0] == [0, 1]


def test_a_queued_item_taken_by_a_reader_that_failed_fails_the_job():
    units = [(0, "a", None), (1, "b", None)]
    by_slot = direct_read.on_queue(units, [5.0, 4.0], 2, "run-q2")
    mine = {w: [u for v, u in by_slot if v == w] for w in (0, 1)}
    failed = direct_read.worker_order(mine[0])
    next(failed)  # takes item 0, then its worker dies before finishing it
    failed.close()
    assert [u[0] for u in direct_read.worker_order(mine[0])] == [1]  # its bundle run again takes what is left
    with pytest.raises(claims.ClaimError, match=r"work items \[0\]"):  # the other finishes last: 0 was lost
        list(direct_read.worker_order(mine[1]))


def test_the_last_chunk_of_a_unit_is_marked_also_before_damage(tmp_path):
    lines = [json.dumps({"text": f"line {i} " * 20, "meta": {"pile_set_name": "Pile-CC"}}).encode()
             for i in range(500)]
    path = write_lines(str(tmp_path / "in.jsonl.zst"), lines)
    whole = list(iter_unit_chunks(path, 0, None, 4096, 1 << 20))
    marked = list(direct_read._last_marked(iter(whole)))
    assert [c.tokenize_now for c in marked] == [False] * (len(whole) - 1) + [True]
    assert [c.lines for c in marked] == [c.lines for c in whole]

    def damaged():
        yield from whole[:3]
        raise inputs.CorruptInputError("broken frame")

    got = []
    with pytest.raises(inputs.CorruptInputError):
        for chunk in direct_read._last_marked(damaged()):
            got.append(chunk)
    assert [c.chunk_index for c in got] == [0, 1, 2] and [c.tokenize_now for c in got] == [False, False, True]


def test_only_the_last_item_of_a_queued_group_has_its_last_chunk_tokenized_at_once(tmp_path):
    lines = [json.dumps({"text": f"line {i} " * 20, "meta": {"pile_set_name": "Pile-CC"}}).encode()
             for i in range(300)]
    path = write_lines(str(tmp_path / "in.jsonl.zst"), lines)
    fn = direct_read.ClaimingReadChunksFn(4096, 1 << 20, "fail")
    for ends_group in (False, True):
        element = (0, path, None, direct_read.Queued("run-m", 0, 2, 0, ends_group))
        chunks = [out for out in fn.process(element) if isinstance(out, inputs.Chunk)]
        assert len(chunks) > 2 and [c.tokenize_now for c in chunks] == [False] * (len(chunks) - 1) + [ends_group]


@pytest.mark.slow
def test_chunks_are_coded_by_their_own_coder_whose_size_estimate_encodes_nothing(tmp_path, monkeypatch):
    import apache_beam as beam

    path = write_lines(str(tmp_path / "a.jsonl.zst"), [b'{"text": "%d"}' % i for i in range(1000)])
    chunk = next(inputs.iter_chunks(path, 0, 1 << 20, 1 << 20))
    coder = beam.coders.registry.get_coder(inputs.Chunk)
    assert isinstance(coder, read.ChunkCoder)
    assert coder.decode(coder.encode(chunk)) == chunk
    encoded = len(coder.encode(chunk))
    # Beam samples the sizes of a step's outputs for its metrics: from the lines, without pickling.
    monkeypatch.setattr(read.pickle, "dumps", lambda *a, **k: pytest.fail("estimate_size encoded the chunk"))
    for estimate in (coder.estimate_size(chunk), coder.get_impl().estimate_size(chunk)):
        assert encoded / 2 < estimate < encoded * 2
    # The read stage's output is typed, so its PCollection gets that coder on every runner.
    with beam.Pipeline() as p:
        out = p | beam.Create([(0, path)]) | beam.ParDo(read.ReadChunksFn(1 << 20, 1 << 20, "fail")).with_output_types(
            inputs.Chunk).with_outputs(read.STATS, main="chunks")
        assert out.chunks.element_type is inputs.Chunk
