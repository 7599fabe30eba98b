"""The documentation's links lead somewhere, and the README's first lines are the two commands."""

import re
from pathlib import Path

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
