"""DirectRunner as this job runs it: Beam's FnApiRunner made here, workers as threads or processes.

Beam's DirectRunner first tries its Prism runner, a Go binary it downloads from GitHub at run time:
the same command would run on two different runners depending on the network. Ours always run on
the FnApiRunner (`fn_api_runner`), their workers threads of the driver while the tokenizer leaves
room for the Python around it, else processes (`running_mode`).
"""

from __future__ import annotations

import logging
import os
import threading

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.config.job import PipelineConfig

# A worker's time spent holding the GIL (reading, JSON, validation, packing, framing: Python) against
# its whole time, the tokenizers releasing it (scripts/bench/bench_pipeline.py's per-stage table):
# small beside SentencePiece, a quarter of a fast engine's.
# Every tokenizer engine releases the GIL (`tokenizers`' reference runs its per-text encode through
# `encode_batch`, which does; `Tokenizer.encode` itself would not).
GIL_SHARE = {"sentencepiece": 0.04}
GIL_SHARE_FAST = 0.25
THREADS_UP_TO = 0.6  # workers x GIL share: above it, threads would queue for the GIL

# Beam's in-process workers (DirectRunner's multi_threading) flush their outputs from a timer thread
# every second. A flush between two writes of one element (the GIL goes to the timer while Python
# code encodes it: pickling a numpy array's dtype is Python) sends half an element, which its reader
# cannot decode: the job fails, or runs out of memory on a length read from the wrong bytes. The same
# workers with a time limit no job reaches flush whole elements only (by size, and when a bundle ends).
NO_TIMED_FLUSH_MS = 7 * 24 * 3600 * 1000
_ADVICE = "If direct_num_workers is not equal to 1, direct_running_mode should be"


class _NoRunningModeAdvice(logging.Filter):
    """Beam advises against in_memory with several workers: ours are threads, given as their environment."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_ADVICE)


def fn_api_runner(options: PipelineOptions):
    """The runner object of a DirectRunner job: Beam's FnApiRunner.

    Beam's DirectRunner first tries its Prism runner, a Go binary it downloads from GitHub at run
    time, and falls back to the FnApiRunner when that fails (offline, for one): the same command
    would run on two different runners depending on the network. Ours always run on the FnApiRunner,
    with the pipeline options handed to its workers as DirectRunner hands them. Worker threads
    (`--direct_running_mode multi_threading`) run in the embedded gRPC environment Beam would give
    them, without its timed flushes (NO_TIMED_FLUSH_MS); worker processes (`multi_processing`) run
    Beam's SDK worker through pipeline/beam/runners/direct/sdk_worker.py. The options then say in_memory, the mode
    in which the runner keeps the environment it is given.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.transforms.environments import EmbeddedPythonGrpcEnvironment, SubprocessSDKEnvironment

    from pipeline.beam.runners.direct.sdk_worker import COMMAND

    direct, environment = options.view_as(DirectOptions), None
    if direct.direct_running_mode in ("multi_threading", "multi_processing"):
        if direct.direct_running_mode == "multi_threading":
            environment = EmbeddedPythonGrpcEnvironment(data_buffer_time_limit_ms=NO_TIMED_FLUSH_MS)
        else:
            environment = SubprocessSDKEnvironment.from_command_string(command_string=COMMAND)
        direct.direct_running_mode = "in_memory"
        runner_log = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
        if not any(isinstance(f, _NoRunningModeAdvice) for f in runner_log.filters):
            runner_log.addFilter(_NoRunningModeAdvice())
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return FnApiRunner(default_environment=environment, provision_info=ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def running_mode_given(beam_args: list[str]) -> bool:
    """Whether the command line (or a config file) chose DirectRunner's running mode."""
    return any(a.startswith("--direct_running_mode") for a in beam_args)


def running_mode(workers: int, backend: str) -> str:
    """DirectRunner's workers as threads of the driver while the GIL is not what limits them, else processes.

    Threads start at once and hand elements over in memory; each worker process imports Beam and our
    modules and unpickles the job before it reads a byte, and every element crosses a socket. The
    tokenizer engines release the GIL, so threads tokenize in parallel; the Python around them does
    not: with a fast tokenizer on many cores, processes win.
    """
    share = GIL_SHARE.get(backend, GIL_SHARE_FAST)
    return "multi_threading" if workers * share <= THREADS_UP_TO else "multi_processing"


def warm_dedup_kernels(config: PipelineConfig, options: PipelineOptions, beam_args: list[str]) -> None:
    """Load dedup's compiled kernels in a thread of the driver now, where its worker threads will sign."""
    if warms_dedup_kernels(config, options, beam_args):
        threading.Thread(target=_warm_dedup_kernels, name="dedup-kernels", daemon=True).start()


def warms_dedup_kernels(config: PipelineConfig, options: PipelineOptions, beam_args: list[str]) -> bool:
    """Whether the driver should load dedup's compiled kernels itself: --dedup in DirectRunner's worker threads.

    The threads sign in this process, and their first signature would otherwise wait for numba's
    import and kernels, in both threads, at the start of the read stage.
    """
    if config.dedup not in ("exact", "near") or options.view_as(StandardOptions).runner != "DirectRunner":
        return False
    direct = options.view_as(DirectOptions)
    if running_mode_given(beam_args):
        return direct.direct_running_mode in ("multi_threading", "in_memory")
    # The mode `run` will pick; a backend not settled yet (auto) counts as a fast one.
    return running_mode(direct.direct_num_workers or os.cpu_count() or 1,
                        config.tokenizer_backend or "") == "multi_threading"


def _warm_dedup_kernels() -> None:
    from pipeline.core import minhash_kernel  # numba loads only in a process that signs

    minhash_kernel.warm_up()

