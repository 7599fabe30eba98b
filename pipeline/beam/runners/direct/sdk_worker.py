"""DirectRunner's worker processes: Beam's SDK worker, without the tracebacks of bundles that failed on our errors.

Beam's worker prints the traceback of every bundle that fails; when the failure is one of our
`JobError`s the command ends with its one line (pipeline/beam/logs.py), so these workers leave that
traceback out, as worker threads do. Started by the FnApiRunner as `python -m pipeline.beam.runners.direct.sdk_worker`
(pipeline/beam/runners/direct/runner.py `fn_api_runner`); everything else is Beam's `sdk_worker_main`.
"""

from __future__ import annotations

import sys

from apache_beam.runners.worker import sdk_worker_main

from pipeline.beam.logs import quiet_job_error_tracebacks

COMMAND = f"{sys.executable} -m pipeline.beam.runners.direct.sdk_worker"


def main() -> None:
    """Beam's SDK worker, its stderr filtered (`quiet_job_error_tracebacks`)."""
    with quiet_job_error_tracebacks():
        sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
