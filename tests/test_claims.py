"""Chunks of a shared file claimed by worker threads: each taken once, by whoever is free; nothing lost."""

import threading
import time

import pytest

from pipeline.beam.runners.direct import claims


def _read_together(run, chunks, readers, delays):
    """Each reader reads all `chunks`, sleeping delays[r] per chunk it takes; returns what each took."""
    took = [[] for _ in range(readers)]
    errors = []

    def read(r):
        try:
            for chunk in claims.claimed(iter(chunks), run, 0, readers, index=lambda c: c):
                took[r].append(chunk)
                time.sleep(delays[r])
        except claims.ClaimError as e:
            errors.append(e)

    threads = [threading.Thread(target=read, args=(r,)) for r in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took, errors


def test_every_chunk_is_taken_once_and_a_slow_reader_takes_fewer():
    took, errors = _read_together("run-claims-1", list(range(60)), 2, [0.001, 0.01])
    assert not errors
    assert sorted(took[0] + took[1]) == list(range(60))
    assert len(took[0]) > 2 * len(took[1]) > 0


def test_a_reader_alone_takes_everything_and_one_arriving_late_nothing():
    took, errors = _read_together("run-claims-2", list(range(5)), 1, [0])
    assert took == [[0, 1, 2, 3, 4]] and not errors
    first = list(claims.claimed(iter(range(4)), "run-claims-3", 7, 2, index=lambda c: c))
    late = list(claims.claimed(iter(range(4)), "run-claims-3", 7, 2, index=lambda c: c))
    assert first == [0, 1, 2, 3] and late == []


def test_a_chunk_claimed_by_a_reader_that_failed_fails_the_last_reader():
    def failing():
        for chunk in claims.claimed(iter(range(4)), "run-claims-4", 0, 2, index=lambda c: c):
            if chunk == 2:
                raise RuntimeError("worker died while tokenizing chunk 2")

    with pytest.raises(RuntimeError, match="chunk 2"):
        failing()
    # Its bundle run again takes chunk 3 (0-2 were claimed by the failed reader) and finishes.
    assert list(claims.claimed(iter(range(4)), "run-claims-4", 0, 2, index=lambda c: c)) == [3]
    # The file's other reader finishes last: chunk 2 was never done, and the job fails.
    with pytest.raises(claims.ClaimError, match=r"chunks \[2\]"):
        list(claims.claimed(iter(range(4)), "run-claims-4", 0, 2, index=lambda c: c))


def test_boards_of_old_runs_are_dropped():
    for k in range(claims.KEEP_RUNS + 3):
        list(claims.claimed(iter(range(2)), f"run-claims-old-{k}", 0, 1, index=lambda c: c))
    assert len(claims._BOARDS) <= claims.KEEP_RUNS
