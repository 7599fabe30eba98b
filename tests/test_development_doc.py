"""docs/development.md's layout names every module of `pipeline/` and `trainers/`, with one line each."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"^( *)(\S+)( +\S.*)?$")  # indent, a file or folder name, its description


def _layout_entries() -> dict[str, str]:
    """Path -> description of every entry in the layout's code block (folders end in '/')."""
    text = (REPO / "docs" / "development.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    entries, folders = {}, []  # folders: [(indent, "pipeline/beam/")]
    for line in block.splitlines():
        match = ENTRY.match(line)
        if not match or not (match.group(2).endswith("/") or match.group(2).endswith(".py")):
            continue  # a description's continuation line
        indent, name = len(match.group(1)), match.group(2)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else "") + name
        entries[path] = (match.group(3) or "").strip()
        if name.endswith("/"):
            folders.append((indent, path))
    return entries


def _modules() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for root in ("pipeline", "trainers") for p in (REPO / root).rglob("*.py")
                  if p.name != "__init__.py")


def test_the_layout_lists_every_module_with_a_line():
    entries = _layout_entries()
    missing = [m for m in _modules() if m not in entries]
    assert missing == [], f"add these to docs/development.md's layout, one line each: {missing}"
    assert [m for m in _modules() if not entries[m]] == []


def test_the_layout_lists_no_module_that_is_gone():
    entries = _layout_entries()
    gone = [p for p in entries if p.endswith(".py") and not (REPO / p).exists()]
    assert gone == []


def test_the_layout_names_every_package_folder():
    entries = _layout_entries()
    folders = sorted(f"{p.parent.relative_to(REPO)}/" for root in ("pipeline", "trainers")
                     for p in (REPO / root).rglob("__init__.py"))
    assert [f for f in folders if f not in entries] == []
