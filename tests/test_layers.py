"""The package's layers: no upward imports, no cycles, commands that never import each other.

The layers, lowest first, are read from docs/development.md's "**Layers**" line (their one list).
The reader depends on core and format only (and never on Beam). Checked on the source with
`ast`, so an import inside a function counts too.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pipeline"


def _documented_layers() -> list[str]:
    """The layers in docs/development.md's line "**Layers**, lowest first: `core` → ... → `cli`."."""
    text = (REPO / "docs" / "development.md").read_text()
    match = re.search(r"\*\*Layers\*\*, lowest first: ((?:`\w+`(?: → )?)+)", text)
    assert match, "docs/development.md has no '**Layers**, lowest first: `a` → `b` ...' line"
    return re.findall(r"`(\w+)`", match.group(1))


ORDER = _documented_layers()
# What each layer may import from the package (besides itself).
ALLOWED = {layer: set(ORDER[: i]) for i, layer in enumerate(ORDER)}
ALLOWED["reader"] = {"core", "format"}
ALLOWED["cli"] |= {"reader"}  # `show` reads an output through the reader
ALLOWED["<top>"] = set(ORDER) | {"reader"}  # pipeline/run.py and pipeline/tfdata.py: the entry points


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, name: str) -> set[str]:
    """Modules of the package that `path` imports (resolved to module names where they are modules)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "pipeline")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipeline":
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ORDER + ["reader"]) else "<top>"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path, name) if m in modules and m != name} for name, path in modules.items()}


def test_no_module_imports_a_higher_layer():
    bad = []
    for module, deps in _graph().items():
        layer = _layer(module)
        for dep in deps:
            other = _layer(dep)
            if other != layer and other not in ALLOWED[layer] and dep != "pipeline":
                bad.append(f"{module} ({layer}) imports {dep} ({other})")
    assert bad == []


def test_the_import_graph_has_no_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep] if dep in stack else [node, dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_commands_never_import_each_other():
    commands = {m for m in _modules() if m.startswith("pipeline.cli.") and m != "pipeline.cli.main"}
    for module, deps in _graph().items():
        if module in commands:
            assert deps & commands == set(), module


BLOCKED = ("apache_beam", "sentencepiece", "zstandard", "matplotlib", "google_crc32c")


def _import_blocking(entry: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"import {entry}\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["pipeline.tfdata", "pipeline.format.manifest", "pipeline.reader.dataset"])
def test_the_reader_imports_without_beam_sentencepiece_or_zstandard(entry):
    result = _import_blocking(entry, BLOCKED)
    assert result.returncode == 0, result.stderr[-2000:]


# The PyTorch reader and the engine it shares with tf.data: no TensorFlow (and none of the job's packages).
@pytest.mark.slow
@pytest.mark.parametrize("entry", ["pipeline.pytorch", "pipeline.reader.engine.doc_reader"])
def test_the_pytorch_reader_imports_without_tensorflow(entry):
    result = _import_blocking(entry, (*BLOCKED, "tensorflow", "keras", "tensorboard"))
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_engine_imports_no_beam():
    """pipeline/process/ (the per-work-item engine) never imports apache_beam, even inside a function."""
    found = set()
    for path in (PACKAGE / "process").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found |= {(path.name, n) for n in names if n.split(".")[0] == "apache_beam"}
    assert found == set() and (PACKAGE / "process" / "engine.py").exists()


# Which modules import a training framework: the tf.data adapters in pipeline/reader/ (and the
# entry point re-exports them), the PyTorch adapter pipeline/pytorch.py; the engine in pipeline/reader/engine/ none.
FRAMEWORKS = {"tensorflow": {"pipeline.reader.dataset", "pipeline.reader.doc_dataset",
                             "pipeline.reader.graph", "pipeline.reader.integrity", "pipeline.reader.mixture_dataset",
                             "pipeline.reader.shards"},
              "torch": {"pipeline.pytorch"}}


def _third_party(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_adapters_import_tensorflow_or_torch_and_the_engine_neither():
    modules = _modules()
    readers = {m: p for m, p in modules.items() if m.startswith(("pipeline.reader", "pipeline.tfdata",
                                                                  "pipeline.pytorch"))}
    for framework, expected in FRAMEWORKS.items():
        assert {m for m, p in readers.items() if framework in _third_party(p)} == expected, framework
    engine = {m for m in modules if m.startswith("pipeline.reader.engine")}
    assert len(engine) > 8
    # The engine imports nothing of the adapters above it.
    graph = _graph()
    assert {(m, d) for m in engine for d in graph[m] if d.startswith("pipeline.reader.")
            and not d.startswith("pipeline.reader.engine")} == set()


def test_layers_are_the_ones_on_disk():
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ORDER) | {
        "reader"}


# core/ is pure: what a process does about its memory, its garbage collector or other processes is
# pipeline/startup/'s (start-up tricks) or io's.
NOT_IN_CORE = {"gc", "ctypes", "mmap", "multiprocessing", "subprocess", "resource", "signal"}


def test_core_imports_nothing_about_processes_allocators_or_the_garbage_collector():
    found = set()
    for path in (PACKAGE / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found |= {(path.name, n) for n in names if n.split(".")[0] in NOT_IN_CORE}
    assert found == set()


PRIVATE_ALLOWED: set = set()  # no private API of a dependency, anywhere in the package
# Public, documented names that begin with "_": os._exit (exit at once, without cleanup handlers).
PUBLIC_UNDERSCORED = {"os._exit"}


def test_no_private_api_of_a_dependency():
    """No `from lib._private import x`, no `lib._private` on an imported module, outside the allow-list."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(REPO))
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names
                               if not a.name.startswith("pipeline"))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("pipeline"):
                if any(part.startswith("_") and not part.startswith("__") for part in node.module.split(".")):
                    found.add((rel, node.module))
                found.update((rel, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("_"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in modules):
                found.add((rel, f"{node.value.id}.{node.attr}"))
    assert {(rel, name) for rel, name in found if name not in PUBLIC_UNDERSCORED} == PRIVATE_ALLOWED
