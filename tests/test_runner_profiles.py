"""Runner profiles (pipeline/beam/runners/): one module per family, one registry row, nothing about runners elsewhere.

Every row of the registry is held to the profile's contract here, without running a job; a new
profile adds its flags to `FLAGS` and a test of its own that the job writes DirectRunner's bytes
on it (docs/extending.md, "How to add a runner").
"""

import ast
import doctest
import re
import types
from pathlib import Path

import pytest

from pipeline.beam.execution import Execution, Workspace
from pipeline.beam.graph import Runtime
from pipeline.beam.options import pipeline_options
from pipeline.beam.remote import Workers
from pipeline.beam.runners import registry
from pipeline.beam.runners.base import RunnerProfile
from pipeline.io.sinks import RecordSink

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pipeline"
RUNNERS = PACKAGE / "beam" / "runners"
# A command line of each family's, for the contract (a new row adds its own).
FLAGS = {
    "direct": ["--direct_num_workers", "2"],
    "dask": ["--runner", "DaskRunner", "--dask_npartitions", "3"],
    "distributed": ["--runner", "FlinkRunner", "--flink_master", "10.0.0.5:8081"],
}


def test_the_registrys_examples_hold():
    assert doctest.testmod(registry).failed == 0


def test_every_family_has_flags_here():
    assert set(FLAGS) == {row.family for row in registry.PROFILES}


@pytest.mark.parametrize("row", registry.PROFILES, ids=lambda row: row.family)
def test_every_profile_keeps_the_contract(row, tmp_path):
    options = pipeline_options(FLAGS[row.family])
    profile = registry.profile_for(options)
    assert isinstance(profile, RunnerProfile) and profile.family == row.family
    assert registry.row_of(FLAGS[row.family][1] if FLAGS[row.family][0] == "--runner" else None) == row
    assert isinstance(profile.runtime, Runtime) and isinstance(profile.workers(options), Workers)
    plan = profile.plan(options, ["a.jsonl.zst", "b.jsonl.zst"], input_bytes=7)
    assert isinstance(plan, Execution) and plan.workers >= 1 and plan.input_bytes == 7
    assert plan.fan_out or plan.workers > 1  # what it plans, it reads: fanned out, or work items per worker
    job = types.SimpleNamespace(execution=plan, run_id="run-0", config=types.SimpleNamespace(output_dir=str(tmp_path)),
                                tokenizer=types.SimpleNamespace(backend=types.SimpleNamespace(name="sentencepiece")))
    with profile.workspace(job, options, FLAGS[row.family], ("127.0.0.1", 1, b"k"), translate_only=True) as space:
        assert isinstance(space, Workspace) and isinstance(space.sink, RecordSink)
        assert space.runtime == profile.runtime and space.progress == ("127.0.0.1", 1, b"k")
        assert (space.reader is None) == plan.fan_out  # a plan without a fan-out has a reader of work items
    assert list(tmp_path.iterdir()) == []  # translated: nothing made in the output directory
    assert profile.failure(ValueError("ours"), options) is None


def test_every_short_name_finds_its_row():
    for row in registry.PROFILES:
        for name in row.names:
            assert registry.row_of(name) is row and registry.row_of(f"{name.title()}Runner") is row
    assert registry.row_of("JetRunner").family == registry.row_of("SamzaRunner").family == "distributed"
    assert registry.row_of(None).family == "direct" and registry.row_of(None).lean_beam


def _modules_outside_runners():
    return [p for p in PACKAGE.rglob("*.py") if RUNNERS not in p.parents]


def test_outside_the_runners_folder_only_the_registry_is_imported():
    """A profile's room (DirectRunner's spill, claims, work items; Dask's store and tasks) is handed to the
    graph by the run through its Workspace, never imported by it."""
    bad = []
    for path in _modules_outside_runners():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module
                else [])
            bad += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith("pipeline.beam.runners.")
                    and not n.startswith("pipeline.beam.runners.registry")]
    assert bad == []


RUNNER_NAME = re.compile(r"(?i)^(?:[\w.]*\.)?\w+runner$")
SHORT_NAMES = {"direct", "dask", "dataflow", "flink", "spark", "portable", "prism", "interactive", "switching",
               "jet", "samza"}


def _names_a_runner(node) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(RUNNER_NAME.match(node.value)) or node.value.lower() in SHORT_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_runner(e) for e in node.elts)
    return False


def runner_name_comparisons(tree: ast.AST) -> list[int]:
    """Lines that compare with a runner's name, test one's prefix, match on one or keep one in a constant."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(_names_a_runner, [node.left, *node.comparators])):
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and any(map(_names_a_runner, node.args))):
            found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _names_a_runner(node.value):
            found.append(node.value.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _names_a_runner(node.value):
            found.append(node.lineno)
    return found


def test_no_runner_name_is_compared_outside_the_runners_folder():
    bad = {str(p.relative_to(REPO)): lines for p in _modules_outside_runners()
           if (lines := runner_name_comparisons(ast.parse(p.read_text())))}
    assert bad == {}


def test_the_scan_finds_what_it_looks_for():
    found = runner_name_comparisons(ast.parse(
        'if runner == "DaskRunner": pass\n'
        'if name in ("direct", "x"): pass\n'
        'DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"\n'
        'ok = runner.endswith("FlinkRunner")\n'
        'match r:\n    case "SparkRunner": pass\n'
        'log("runs on DirectRunner")\n'))
    assert sorted(found) == [1, 2, 3, 4, 6]


def test_one_install_line_for_dask():
    """The README's extras table, docs/deployment.md and beam_configs/dask.toml give the same install."""
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `pip install '.[dask]'`"))
    texts = {"README.md": row, "docs/deployment.md": (REPO / "docs" / "deployment.md").read_text(),
             "beam_configs/dask.toml": (REPO / "beam_configs" / "dask.toml").read_text()}
    for name, text in texts.items():
        # (the row's own `pip install '.[dask]'` names the extra, not what to install for a job)
        extras = set(re.findall(r"\[([\w,]*dask[\w,]*)\]", text.replace("'.[dask]'", "")))
        assert extras == {"worker,dask"}, (name, extras)
