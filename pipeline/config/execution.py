"""How the work spreads and resumes: `ExecutionOptions` of `pile-pipeline run`; never the output's bytes."""

from __future__ import annotations

import dataclasses

from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option

FAN_OUT_CHOICES = ("auto", "yes", "no")  # pipeline/beam/execution.py
MAX_THREADS = 1024  # more threads per batch than the largest machines have cores only share them


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionOptions(OptionGroup):
    """--fan_out, --tokenizer_threads, --progress_every, --resume: none is recorded, the output is the same anyway."""

    title = "how the work spreads (never changes the output)"

    fan_out: str = option(
        "auto", choices=FAN_OUT_CHOICES, recorded=False,
        help="shuffle chunks to any worker (yes), give each worker whole files (no), or auto: fan out on "
        "distributed runners; on DirectRunner whole files or stripes of them, by estimated cost. The output is "
        "the same either way")
    tokenizer_threads: int | None = option(
        None, recorded=False, shown_default="cores / workers on DirectRunner, 1 elsewhere",
        bounds=Bounds(1, MAX_THREADS, why="more threads than a machine has cores only share them"),
        help="threads per tokenizer batch")
    progress_every: float = option(
        10.0, recorded=False, bounds=Bounds(0, low_why="0: no progress lines"),
        help="seconds between progress lines on DirectRunner (0: none); a progress bar instead on a terminal")
    resume: bool = option(
        False, recorded=False,
        help="take up a run of this same job that was killed or failed in --output_dir: reuse every work item it "
        "finished (refused, naming what differs, when an input or an option that changes the output differs); "
        "with nothing to resume, the job runs from the start. Never replaces a finished output (that is "
        "--overwrite)")
