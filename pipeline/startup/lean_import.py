"""Importing Beam for a job that runs in this process, without the cloud connectors it never uses.

`import apache_beam` imports, wherever they are installed, Beam's BigQuery, Pub/Sub and Dataflow
clients, its GCS and S3 file systems and its pandas type hints: about half of its import time,
on one core while the others wait. A job on DirectRunner uses none of them: our
inputs and outputs go through fsspec (pipeline/io/files.py), never Beam's FileSystems, and no
transform of ours is a Beam connector. Beam imports each of these under `try/except ImportError`
(an install without the `gcp`/`aws` extras works that way), so for the length of the import their
names are set to None in `sys.modules` (Python's documented way to make an import fail, with
ModuleNotFoundError) and then taken out again: anything imported later (gcsfs, s3fs, pandas) loads
as usual. The driver of a Dask job only translates it (its workers import Beam themselves), and
gets the same. Any other runner gets Beam whole: Dataflow needs its client, and the portable
runners' job services may stage through Beam's file systems. Which runner's command may is its
profile's row (pipeline/beam/runners/registry.py `lean_beam`), asked by the command. Only in a
process that runs one command and exits (pipeline/startup/command.py): a program that calls
`pipeline.cli.run.main` itself may run a Dataflow job after a DirectRunner one, and gets Beam whole.
"""

from __future__ import annotations

import importlib
import sys

# Beam's modules (or the packages they try) that import the connectors; each is optional to Beam.
CONNECTORS = (
    "apache_beam.io.gcp.bigquery",  # BigQuery, Pub/Sub, GCS and cross-language I/O (apache_beam.io)
    "apache_beam.io.gcp.gcsfilesystem",
    "apache_beam.io.aws.s3filesystem",
    "google.cloud.dataflow",  # the Dataflow client (apache_beam.runners.dataflow)
    "apitools",  # Google API error types (apache_beam.utils.retry)
    "pandas",  # pandas type hints (apache_beam.typehints)
)


def import_beam(lean: bool = False) -> None:
    """Import Beam: without its connectors when `lean` (in a one-command process whose runner never needs them).

    `lean`: the job's runner never uses them in this process, and this process runs one command, then exits.
    """
    if "apache_beam" in sys.modules or not lean:
        importlib.import_module("apache_beam")
        return
    blocked = [name for name in CONNECTORS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None
    try:
        importlib.import_module("apache_beam")
    except ImportError:
        # A Beam that needs one of them after all: forget the partial import and take Beam whole.
        for name in [m for m in sys.modules if m == "apache_beam" or m.startswith("apache_beam.")]:
            del sys.modules[name]
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    importlib.import_module("apache_beam")
