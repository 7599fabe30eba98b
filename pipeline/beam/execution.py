"""How a job spreads over the workers (`Execution`), and what a run hands its workers (`Workspace`).

None of this changes a byte of the output (chunk boundaries and record order come from the input
and the config alone), so it is kept out of the config and the manifest. Each runner's profile
(pipeline/beam/runners/) plans its Execution once, in the driver, and makes the run's Workspace;
the graph reads both and never asks which runner it is on. Shared by every runner.
"""

from __future__ import annotations

import dataclasses

import fsspec

from pipeline.beam.graph import EVERY_FEATURE, Runtime
from pipeline.io.sinks import KEEP, RecordSink
from pipeline.io.workfolder import WorkFolder


@dataclasses.dataclass(frozen=True)
class Execution:
    """How one job runs.

    fan_out: shuffle chunks to workers (any worker tokenizes any chunk); else the workspace's reader
    hands each worker its own work items (pipeline/beam/runners/work_items.py);
    workers: slots work items are balanced over when not fanning out;
    share: files may be shared between workers in stripes (`share_files`), else each is read whole;
    encode_threads: threads per tokenizer batch (None: the library's default, all cores);
    encode_batch_bytes: decompressed bytes of chunks tokenized in one call (0: a chunk per call);
    input_bytes: the inputs' stored size, the 100% of progress.
    """

    fan_out: bool = True
    workers: int = 1
    share: bool = False
    encode_threads: int | None = None
    encode_batch_bytes: int = 0
    input_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class Workspace:
    """What a run makes once it holds the output directory's lock, for its workers (its profile's `workspace`).

    sink: where record blocks go (pipeline/io/sinks.py): KEEP, they cross the shuffle as they are;
    progress: where workers send their progress (pipeline/beam/progress.py), None: metrics only;
    runtime: what the graph may ask of the runner (pipeline/beam/graph.py);
    reader: how the workers get their work items when they read their own (its `read`, as
    pipeline/beam/read.py `read_chunks` calls it); None: chunks fanned out;
    work: where finished work items are committed (pipeline/io/workfolder.py), None: nowhere (the run
    cannot be resumed). The command adds it to its profile's workspace (pipeline/beam/launch.py).
    """

    sink: RecordSink = KEEP
    progress: tuple[str, int, bytes] | None = None  # the Monitor's (host, port, key)
    runtime: Runtime = EVERY_FEATURE
    reader: object | None = None
    work: WorkFolder | None = None


def file_sizes(paths: list[str]) -> list[int]:
    """Byte sizes of the input files (compressed); 1 for any whose size cannot be had."""
    sizes = []
    for path in paths:
        try:
            fs, root = fsspec.core.url_to_fs(path)
            sizes.append(int(fs.size(root) or 1))
        except (OSError, ValueError):
            sizes.append(1)
    return sizes
