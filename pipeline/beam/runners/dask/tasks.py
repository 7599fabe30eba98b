"""How Dask's tasks get their work items: each task reads its own, and tokenizes them as it reads.

A dask task is a list, outputs included, and `beam.Reshuffle` does nothing there: a fan-out of
chunks would hold every chunk of a task's files in one list. So the reading is cut into one task
per slot (`Execution.workers`: a thread of the cluster), each given its work items (whole files,
frames, row groups, stripes of a big file, balanced by estimated cost:
pipeline/beam/runners/work_items.py), and the step that takes the chunks reads them itself, in the
same task (pipeline/beam/read.py `Unread`, `chunk_stage`).

Element shapes:
  (slot, work items)  -> the first step that takes chunks (ReadThenFn: read, then that step)
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.beam.read import ReadChunksFn, Unread
from pipeline.beam.runners.work_items import balance, stripes_apart, work_items


def tasks_of(job, files: list[tuple[int, str]], frames_of: dict) -> tuple[list[tuple], dict]:
    """Each task's (slot, work items), balanced by estimated cost; the slots that read each file."""
    units, costs = work_items(job, files, frames_of)
    slot_of = balance(costs, job.execution.workers, stripes_apart(units))
    by_slot: dict[int, list] = {}
    slots_of_file: dict[int, list[int]] = {}
    for slot, unit in sorted(zip(slot_of, units, strict=True), key=lambda item: (item[0], item[1][:2])):
        by_slot.setdefault(slot, []).append(unit)
        if slot not in slots_of_file.setdefault(unit[0], []):
            slots_of_file[unit[0]].append(slot)
    return [(slot, tuple(items)) for slot, items in sorted(by_slot.items())], slots_of_file


class Tasks:
    """The workspace's reader on Dask (pipeline/beam/read.py `read_chunks`): work items per task, read later."""

    def read(self, p: beam.Pipeline, job, read_fn: ReadChunksFn, files: list[tuple[int, str]], frames_of: dict):
        """`Unread` work items of one task per slot, and no read stats yet (they come out of the step that reads)."""
        items, slots_of_file = tasks_of(job, files, frames_of)
        return Unread(p | "ListInputs" >> beam.Create(items), read_fn, slots_of_file), None
