"""No source, test, script or document of the repository is over 500 lines: past that, split it by responsibility.

Data (the sample corpus, tokenizer models and vocabularies, pinned JSON) is not counted.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 500
TEXT = {".py", ".md", ".sh", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".html", ".css", ".js", ".ini"}


SKIP = {"__pycache__", "build", "dist", "node_modules"}


def _tracked() -> list[Path]:
    """The repository's files, its hidden folders (.git, the virtualenvs) and build outputs aside."""
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP and not d.endswith(".egg-info")]
        found += [Path(root) / name for name in files]
    return found


def test_no_file_is_over_500_lines():
    files = [p for p in _tracked() if p.suffix in TEXT and p.is_file()]
    assert len(files) > 200, "too few files found: is this the repository?"
    over = {str(p.relative_to(REPO)): n for p in files if (n := len(p.read_bytes().splitlines())) > LIMIT}
    assert over == {}, f"split these by responsibility (at most {LIMIT} lines): {over}"
