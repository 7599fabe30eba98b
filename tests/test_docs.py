"""The documentation's links lead somewhere, the README's first lines are the two commands, and the
docs' commands run as written: each ```bash block is marked as run here, as needing your values
(buckets, clusters, your data), or as long (benchmarks, set-ups: minutes to hours). Each test the
reliability lists name (docs/operations.md, docs/resume.md) is a test of tests/."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_every_relative_link_resolves():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, _ in LINK.findall(page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_the_readme_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert lines[0] == "```bash"
    assert lines[1].startswith("bash scripts/quickstart.sh") and lines[2].startswith("bash scripts/test.sh")
    assert lines[3] == "```"
    for script in ("scripts/quickstart.sh", "scripts/test.sh"):
        assert (REPO / script).exists()


def test_every_test_the_reliability_lists_name_is_a_test():
    tests = {path.stem for path in (REPO / "tests").rglob("test_*.py")}
    for path in (REPO / "tests").rglob("*.py"):
        tests |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE))
    named = set()
    for page in ("operations.md", "resume.md"):
        text = (REPO / "docs" / page).read_text()
        for prefix, choices in re.findall(r"\b(test_\w*)\{([\w,]+)\}", text):  # test_resume_{kills,dask}
            named |= {prefix + choice for choice in choices.split(",")}
        named |= {name for name in re.findall(r"\b(test_\w+)\b(?!\{)", text) if not name.endswith("_")}
    assert len(named) > 100
    assert sorted(named - tests) == []


MARKERS = {"<!-- doc-test: run -->": "run", "<!-- doc-test: your values -->": "values",
           "<!-- doc-test: long -->": "long"}


def doc_commands() -> list[tuple[str, str, str]]:
    """(page:line, marker kind or None, the commands) of every ```bash block in docs/."""
    blocks = []
    for page in sorted((REPO / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("```bash"):
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                kind = MARKERS.get(lines[i - 1].strip()) if i else None
                blocks.append((f"{page.name}:{i + 1}", kind, "\n".join(lines[i + 1 : end])))
    return blocks


def test_every_command_in_the_docs_is_run_or_marked_as_needing_your_values_or_long():
    unmarked = [where for where, kind, _ in doc_commands() if kind is None]
    assert unmarked == [], f"mark each with one of {list(MARKERS)} on the line before the fence"
    assert [where for where, kind, _ in doc_commands() if kind == "run"]


@pytest.mark.slow
@pytest.mark.parametrize("where,commands", [(w, c) for w, k, c in doc_commands() if k == "run"])
def test_the_runnable_commands_in_the_docs_run_as_written(where, commands):
    # As a user runs them: from the repository root, with the environment's console scripts on PATH.
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
           "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{where}:\n{result.stderr[-3000:]}"
