"""TensorFlow's start-up notices, kept off a command's output: its C++ code writes them to fd 2.

TF 2.20 and later log through absl before `TF_CPP_MIN_LOG_LEVEL` is read ("All log messages
before absl::InitializeLog() is called are written to STDERR"), and a machine without a GPU gets
an ERROR-level `cuInit` line that level 2 keeps. `quiet_native_notices()` sends fd 2 to a
temporary file while TensorFlow loads and first runs, then writes back every line that is not one
of these notices: a real error still shows.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Lines that say nothing about the command's work: CPU/GPU discovery and build notices.
NOTICE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|oneDNN custom operations are on"
    r"|Could not find cuda drivers on your machine"
    r"|failed call to cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|TF-TRT Warning: Could not find TensorRT"
    r"|Skipping registering GPU devices"
)


def keep(text: str) -> str:
    """`text` without the notice lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not NOTICE.search(line))


@contextlib.contextmanager
def quiet_native_notices() -> Iterator[None]:
    """Filter TensorFlow's notices out of what native code writes to fd 2 inside the block."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") == "0":
        yield  # the user asked for TensorFlow's logs
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            rest = keep(captured.read().decode("utf-8", "replace"))
            if rest:
                os.write(2, rest.encode("utf-8"))  # where it was going: fd 2
