"""Shim for Beam's `--setup_file ./setup.py` (Dataflow workers install the package from its sdist).

Everything (name, version, dependencies, packages) lives in pyproject.toml; setuptools reads it
from there. Beam builds the sdist with `python -m build --sdist --no-isolation` when the `build`
module is installed, else with `python setup.py sdist`, which is why this file exists.
"""

from setuptools import setup

setup()
