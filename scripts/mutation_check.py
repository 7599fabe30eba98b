"""How strong are a module's tests? Apply small changes to its source, one at a time, and run them.

    python scripts/mutation_check.py pipeline/core/shuffle.py --lines 54-80 -- tests/test_shuffle.py
    python scripts/mutation_check.py pipeline/io/decompress.py \\
        --replace 'self._offset += end' 'pass' -- tests/test_frames.py

Each mutant is one change: a comparison or arithmetic operator swapped (`>=` for `>`, `+` for
`-` ...), `and`/`or` or `True`/`False` swapped, an integer literal plus one, or a one-line
statement (an assignment, a `raise`, a call) replaced by `pass`; with `--replace OLD NEW`, only the
given text replacements (each must occur exactly once). For each mutant the given pytest arguments
run (`-x`, in a fresh interpreter); a mutant the tests still pass on is a survivor: a behaviour no
test pins, or a change that does not change behaviour (an equivalent mutant: judge each by hand).
The module's file is restored byte for byte and with its modification time after every mutant,
also on Ctrl-C or SIGTERM. Exit status 1 when a mutant survived, 2 on bad usage or when the tests fail
without any change.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import signal
import subprocess
import sys
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

_SWAPS = {
    ">=": ">", ">": ">=", "<=": "<", "<": "<=", "==": "!=", "!=": "==",
    "+": "-", "-": "+", "*": "//", "//": "*", "<<": ">>", ">>": "<<", "&": "|", "|": "&",
    "+=": "-=", "-=": "+=", "and": "or", "or": "and", "True": "False", "False": "True",
    "is": "is not", "in": "not in",
}


@dataclass(frozen=True)
class Mutant:
    line: int
    description: str
    source: str


def _replace_span(lines: list[str], row: int, start: int, end: int, text: str) -> str:
    out = list(lines)
    out[row - 1] = out[row - 1][:start] + text + out[row - 1][end:]
    return "".join(out)


def operator_mutants(source: str, first: int, last: int) -> list[Mutant]:
    """Every token-level and statement-level mutant of the lines [first, last]."""
    lines = source.splitlines(keepends=True)
    mutants = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        row, col = tok.start
        if not first <= row <= last or tok.start[0] != tok.end[0]:
            continue
        new = None
        if tok.type == tokenize.OP or (tok.type == tokenize.NAME and tok.string in _SWAPS):
            new = _SWAPS.get(tok.string)
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            new = str(int(tok.string) + 1)
        if new is not None:
            text = _replace_span(lines, row, col, tok.end[1], new)
            mutants.append(Mutant(row, f"{tok.string!r} -> {new!r}", text))
    for node in ast.walk(ast.parse(source)):
        kinds = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Expr, ast.Return)
        if not isinstance(node, kinds) or not first <= node.lineno <= last or node.lineno != node.end_lineno:
            continue
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call):
            continue  # docstrings
        if isinstance(node, ast.Return):
            if node.value is None:
                continue
            new = "return None"
        else:
            new = "pass"
        text = _replace_span(lines, node.lineno, node.col_offset, node.end_col_offset, new)
        mutants.append(Mutant(node.lineno, f"statement -> {new}", text))
    return [m for m in mutants if _compiles(m.source)]


def replacement_mutants(source: str, pairs: list[list[str]]) -> list[Mutant]:
    mutants = []
    for old, new in pairs:
        if source.count(old) != 1:
            sys.exit(f"--replace: {old!r} occurs {source.count(old)} times in the module (it must be once)")
        line = source[:source.index(old)].count("\n") + 1
        mutants.append(Mutant(line, f"{old!r} -> {new!r}", source.replace(old, new)))
    return mutants


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


def run_tests(pytest_args: list[str], timeout: float) -> str:
    """'passed', 'failed' or 'timeout' (a hang is a detected change, as a failure is)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # no stale .pyc of a same-size mutant
    env.setdefault("PYTHONPATH", os.getcwd())
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *pytest_args]
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "passed" if done.returncode == 0 else "failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("module", type=Path, help="the Python file to mutate")
    parser.add_argument("pytest_args", nargs="+", help="after --: the tests (and pytest options) to run")
    parser.add_argument("--lines", default="", help="only mutate lines FIRST-LAST of the module")
    parser.add_argument("--replace", nargs=2, action="append", default=[], metavar=("OLD", "NEW"),
                        help="run only this text replacement (repeatable) instead of the generated mutants")
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds per test run (default: 10 s plus 5 times the unchanged run's time)")
    args = parser.parse_args(argv)
    if not args.module.is_file():
        parser.error(f"module: no such file {args.module}")
    original = args.module.read_bytes()
    stat = args.module.stat()
    source = original.decode()
    if args.replace:
        mutants = replacement_mutants(source, args.replace)
    else:
        first, _, last = args.lines.partition("-")
        mutants = operator_mutants(source, int(first or 1), int(last or len(source.splitlines())))
    started = time.monotonic()
    if run_tests(args.pytest_args, args.timeout or 3600) != "passed":
        print("the tests do not pass on the unchanged module; fix that first", file=sys.stderr)
        return 2
    timeout = args.timeout or 10 + 5 * (time.monotonic() - started)
    survivors = []
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` or kill: restore the module first
    try:
        for i, mutant in enumerate(mutants, 1):
            args.module.write_text(mutant.source)
            outcome = run_tests(args.pytest_args, timeout)
            args.module.write_bytes(original)
            os.utime(args.module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            verdict = "SURVIVED" if outcome == "passed" else f"killed ({outcome})"
            print(f"[{i}/{len(mutants)}] {args.module}:{mutant.line} {mutant.description}: {verdict}", flush=True)
            if outcome == "passed":
                survivors.append(mutant)
    finally:
        args.module.write_bytes(original)
        os.utime(args.module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    print(f"{len(mutants)} mutants, {len(mutants) - len(survivors)} killed, {len(survivors)} survived "
          f"({time.monotonic() - started:.0f} s)")
    for mutant in survivors:
        print(f"  survived: {args.module}:{mutant.line} {mutant.description}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
