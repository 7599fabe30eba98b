"""How a job spreads over workers: fan-out, tokenizer threads, files balanced per worker."""

import os

import pytest

from pipeline.beam.execution import balance, plan_execution

FILES = [f"f{i}" for i in range(8)]


def test_direct_runner_with_enough_files_gives_each_worker_whole_files():
    plan = plan_execution("DirectRunner", 2, FILES)
    assert not plan.fan_out and plan.workers == 2
    assert plan.encode_threads == max(1, (os.cpu_count() or 1) // 2)


def test_zero_direct_workers_means_one_per_core():
    assert plan_execution("DirectRunner", 0, FILES).workers == (os.cpu_count() or 1)


def test_few_files_or_a_distributed_runner_fan_chunks_out():
    assert plan_execution("DirectRunner", 2, FILES[:3]).fan_out  # 3 files < 2 per worker
    dataflow = plan_execution("DataflowRunner", None, FILES * 10)
    assert dataflow.fan_out and dataflow.encode_threads == 1  # one SDK process per vCPU there


def test_explicit_choices_win():
    assert plan_execution("DirectRunner", 2, FILES[:1], "no").fan_out is False
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
