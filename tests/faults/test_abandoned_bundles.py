"""A job failing on one of our errors ends with its one line, even while Beam abandons other bundles.

Beam's SDK worker does not wait for its bundles in flight when the runner stops it: a bundle the
runner gave up on as the job failed ends in a KeyError traceback of Beam's own. Run with Beam's
real workers (threads of this process, and processes), a bundle failing while another one runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fault_helpers import command_env

from pipeline.beam.logs import _QuietJobErrors

JOB = str(Path(__file__).with_name("failing_bundle_job.py"))

_ABANDONED = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/apache_beam/runners/worker/sdk_worker.py", line 724, in process_bundle
    self.bundle_processor_cache.release(instruction_id)
  File "/venv/lib/python3.11/site-packages/apache_beam/runners/worker/sdk_worker.py", line 596, in release
    self.active_bundle_processors.pop(instruction_id))
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'bundle_18'
"""
_JOB_ERROR = """Traceback (most recent call last):
  File "/tmp/job.py", line 12, in process
pipeline.io.outputs.OutputRejectedError: the output is refused [while running 'ParDo(Fail)']
"""
_OTHER = """Traceback (most recent call last):
  File "/tmp/job.py", line 12, in process
ZeroDivisionError: division by zero
"""


class _Written:
    def __init__(self):
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)


def _printed(*tracebacks: str) -> str:
    out = _Written()
    stream = _QuietJobErrors(out)
    for text in tracebacks:
        print(text, file=stream)
    return out.text


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_a_bundle_abandoned_as_the_job_fails_prints_no_traceback(tmp_path, mode):
    proc = subprocess.run([sys.executable, JOB, mode, str(tmp_path)], capture_output=True, text=True,
                          env=command_env(), timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "failed: the output is refused" in proc.stderr
    assert any(tmp_path.iterdir()), "the other bundle never started: nothing was abandoned"
    assert "Traceback" not in proc.stderr and "KeyError" not in proc.stderr, proc.stderr[-5000:]


def test_the_filter_leaves_out_job_errors_and_abandoned_bundles_only():
    assert _printed(_ABANDONED) == ""
    assert _printed(_JOB_ERROR) == ""
    assert _printed(_OTHER) == _OTHER + "\n"
    # After a bundle failed on a JobError, any bundle cut short as the runner stops its workers is an echo.
    assert _printed(_JOB_ERROR, _OTHER) == ""
    assert _printed(_OTHER, _JOB_ERROR, "a line\n") == _OTHER + "\n" + "a line\n\n"
