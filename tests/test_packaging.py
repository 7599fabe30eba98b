"""Packaging: a light base install for training containers, pinned versions, and workers that match.

- The base install (no extras) is what the reader needs: no Beam, no cloud SDKs, no matplotlib.
- constraints.txt pins every package the suite ran with; it satisfies pyproject.toml's ranges.
- Dataflow workers install beam_configs/worker_requirements.txt: the `worker` extra's packages
  (without apache-beam, which the worker image holds at the launcher's version), at the pinned versions.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
TOML = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = TOML["project"]


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(req).name).lower()


def _pins(path: Path, python: str = "3.11") -> dict[str, str]:
    """The pins that hold on `python` (a line may carry a marker: `numpy==2.2.6 ; python_version < "3.11"`)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"python_version": python}):
                (spec,) = req.specifier
                pins[_name(line)] = spec.version
    return pins


def _expand(extra: str) -> list[Requirement]:
    out = []
    for req in PROJECT["optional-dependencies"][extra]:
        parsed = Requirement(req)
        if _name(req) == "pile-pipeline":
            for inner in sorted(parsed.extras):
                out += _expand(inner)
        else:
            out.append(parsed)
    return out


SUPPORTED_PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def test_the_base_install_is_the_readers():
    assert sorted(_name(r) for r in PROJECT["dependencies"]) == ["fsspec", "numpy", "tomli"]
    (tomli,) = [Requirement(r) for r in PROJECT["dependencies"] if _name(r) == "tomli"]
    assert not tomli.marker.evaluate({"python_version": "3.11"})  # tomllib from 3.11 on


def test_requires_python_and_ruff_cover_the_supported_pythons():
    spec = SpecifierSet(PROJECT["requires-python"])
    assert [v for v in SUPPORTED_PYTHONS + ["3.9", "3.14"] if f"{v}.0" in spec] == SUPPORTED_PYTHONS
    assert TOML["tool"]["ruff"]["target-version"] == "py310"


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_constraints_pin_every_requirement_within_its_range(python):
    pins = _pins(REPO / "constraints.txt", python)
    extras = [r for extra in PROJECT["optional-dependencies"] for r in _expand(extra)]
    for req in [Requirement(r) for r in PROJECT["dependencies"]] + extras:
        if req.marker is not None and not req.marker.evaluate({"python_version": python}):
            continue
        name = _name(str(req))
        assert name in pins, f"{name} is not pinned in constraints.txt for Python {python}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} outside {req}"


def test_dataflow_workers_get_the_worker_extra_at_the_pinned_versions():
    worker = {_name(str(r)) for r in _expand("worker")} - {"apache-beam"}
    wanted = _pins(REPO / "beam_configs" / "worker_requirements.txt")
    assert set(wanted) == worker
    pins = _pins(REPO / "constraints.txt")
    assert {name: pins[name] for name in worker} == wanted


def test_the_quickstart_installs_only_the_job_and_the_reader():
    script = (REPO / "scripts" / "quickstart.sh").read_text()
    (extras,) = re.findall(r"^EXTRAS=(\S+) bash scripts/setup_env.sh$", script, re.M)
    assert sorted(extras.split(",")) == ["pipeline", "reader"]
    installed = {_name(str(r)) for extra in extras.split(",") for r in _expand(extra)}
    assert not installed & {"sagemaker", "moto", "ruff", "pytest", "matplotlib", "s3fs", "gcsfs"}
    assert 'pip" install' in (REPO / "scripts" / "setup_env.sh").read_text() and "${EXTRAS:-dev}" in (
        REPO / "scripts" / "setup_env.sh").read_text()


@pytest.mark.slow
def test_test_pythons_says_plainly_which_python_it_cannot_test():
    script = str(REPO / "scripts" / "test_pythons.sh")
    env = {**os.environ, "PYTHONS": "3.99"}
    result = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Python 3.99: NOT TESTED: no python3.99 on PATH" in result.stdout
    assert "NOT TESTED on this machine: Python 3.99" in result.stdout
    strict = subprocess.run(["bash", script], env={**env, "REQUIRE_ALL_PYTHONS": "1"}, capture_output=True,
                            text=True, timeout=60)
    assert strict.returncode == 1
