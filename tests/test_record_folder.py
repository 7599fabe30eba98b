"""The Dask run's record folder (pipeline/io/sinks.py): removed after the job, even while a worker the
job lost still writes into it, without hiding the job's own failure."""

import os
import threading
import time

from pipeline.beam.runners.dask.store import remove_folder, store_folder


def test_a_folder_written_into_while_it_is_removed_does_not_raise(tmp_path, caplog):
    folder = store_folder(str(tmp_path))
    os.makedirs(folder)
    stop = threading.Event()

    def writer():  # a worker that has not noticed the job is over
        i = 0
        while not stop.is_set():
            sub = os.path.join(folder, f"d{i % 50}")
            try:
                os.makedirs(sub, exist_ok=True)
                with open(os.path.join(sub, f"{i}.records"), "wb") as f:
                    f.write(b"x" * 64)
            except OSError:
                pass
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.05)
        remove_folder(folder, attempts=2)  # never raises: removed, or left with a warning
    finally:
        stop.set()
        thread.join()
    remove_folder(folder)
    assert not os.path.exists(folder)


def test_nothing_to_remove():
    remove_folder(None)
    remove_folder("/nonexistent/.records.tmp-" + "0" * 32)
