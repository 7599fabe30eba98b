"""A Beam job on DirectRunner's own workers whose one bundle fails on a JobError while another bundle runs.

Run as `python failing_bundle_job.py MODE MARK_DIR` by tests/faults/test_abandoned_bundles.py: the
failing element waits until an element of another bundle has started (a file in MARK_DIR), so the
runner gives up on a bundle still in flight as the job fails. The command prints the job's one line
and lingers while the abandoned bundle ends, as our command does until it exits; its logging is
the command's (`configure_logging`).
"""

from __future__ import annotations

import os
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.logs import configure_logging, failure_line, quiet_job_error_tracebacks
from pipeline.beam.runners.direct.runner import fn_api_runner
from pipeline.io.outputs import OutputRejectedError


class FailWhileAnotherBundleRuns(beam.DoFn):
    def __init__(self, marks: str):
        self._marks = marks

    def process(self, x):
        if x == 0:
            deadline = time.monotonic() + 5
            while not os.listdir(self._marks) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise OutputRejectedError("the output is refused")
        open(os.path.join(self._marks, str(x)), "w").close()
        time.sleep(0.5)
        yield x


def main(mode: str, marks: str) -> int:
    configure_logging()
    options = PipelineOptions(["--runner", "DirectRunner", "--direct_running_mode", mode,
                               "--direct_num_workers", "2"])
    p = beam.Pipeline(runner=fn_api_runner(options), options=options)
    try:
        with quiet_job_error_tracebacks(), p:
            _ = p | beam.Create(range(4)) | beam.Reshuffle() | beam.ParDo(FailWhileAnotherBundleRuns(marks))
    except Exception as e:  # noqa: BLE001 - the job's one line, as pipeline/beam/launch.py reports it
        print(f"failed: {failure_line(e)}", file=sys.stderr)
        time.sleep(1.5)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
