"""Installed package versions, for manifests and model cards."""

from __future__ import annotations

import importlib.metadata

PACKAGE = "pile-pipeline"


def package_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def created_by() -> str:
    """`pile-pipeline 0.1.0`: what wrote an output (manifest, card)."""
    return f"{PACKAGE} {package_version(PACKAGE) or 'unknown'}"


# The version of what the job writes for given inputs and options: raised with every change of the
# code that makes them give other bytes (tests/test_output_pinned.py's pins were made with it and
# refuse to be made again without a new one). A run resumes only the work of a run of its own version.
OUTPUT_VERSION = 2
