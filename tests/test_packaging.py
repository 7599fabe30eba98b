"""Packaging: a light base install for training containers, pinned versions, and workers that match.

- The base install (no extras) is what the reader needs: no Beam, no cloud SDKs, no matplotlib.
- constraints.txt pins every package the suite ran with; it satisfies pyproject.toml's ranges.
- Dataflow workers install beam_configs/worker_requirements.txt: the `worker` extra's packages
  (without apache-beam, which the worker image holds at the launcher's version), at the pinned versions.
"""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(req).name).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_name(name)] = version
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


def test_the_base_install_is_the_readers():
    assert sorted(_name(r) for r in PROJECT["dependencies"]) == ["fsspec", "numpy"]


def test_constraints_pin_every_requirement_within_its_range():
    pins = _pins(REPO / "constraints.txt")
    extras = [r for extra in PROJECT["optional-dependencies"] for r in _expand(extra)]
    for req in [Requirement(r) for r in PROJECT["dependencies"]] + extras:
        name = _name(str(req))
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} outside {req}"


def test_dataflow_workers_get_the_worker_extra_at_the_pinned_versions():
    worker = {_name(str(r)) for r in _expand("worker")} - {"apache-beam"}
    wanted = _pins(REPO / "beam_configs" / "worker_requirements.txt")
    assert set(wanted) == worker
    pins = _pins(REPO / "constraints.txt")
    assert {name: pins[name] for name in worker} == wanted
