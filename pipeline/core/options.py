"""Options declared once, on the dataclass that holds them; the command line is derived from it.

    @dataclasses.dataclass(frozen=True)
    class Config:
        seq_len: int = option(2048, help="label positions per record")
        epochs: tuple = option((), help="per-subset epochs", parse=parse_epochs, metavar="SPEC")

`add_options(parser, Config)` adds `--seq_len` and `--epochs` (help text with the default, choices
and required marks); `values_from(Config, namespace)` turns what was given into constructor
arguments, running each option's `parse` and naming the flag in any error.

Numbers: `bounds=Bounds(low, high, why=...)` declares an option's physical range; `check_declared`
refuses a value outside it, or outside its `choices`, with one line naming the flag. The manifest:
`recorded` gives the options that decide an output's bytes, each as its `record` turns it (a URL
redacted), when its `recorded` (True, or a predicate of the config) and its group's
`recorded_when` hold; the groups a config is made of are pipeline/core/option_groups.py's.

`parse_command_line` is the whole front door of a command: an optional `--config FILE` (TOML whose
[pipeline] table holds our options and [beam] table the runner's, both applied as if they came
first on the command line, so they are checked the same way), our flags, and everything else for
the runner (Beam's `PipelineOptions`), which must consist of flags the runner knows. A misspelled
flag, a leftover positional argument (an unquoted glob that the shell expanded), a missing
required flag or a placeholder left in the config file (`my-bucket`, `my-project`, `CHANGE`,
`<...>`) that the command line does not replace is a `UsageError`: one line that names the flag,
and exit status 2 from the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, under its PyPI name
    import tomli as tomllib


class UsageError(ValueError):
    """The command line (or a --config file) asks for something that cannot be done; exit 2."""


# The placeholders of beam_configs/*.toml (and the usual others): a value no real job has.
PLACEHOLDER = re.compile(r"\bmy-(?:bucket|project)\b|\bCHANGE(?:[_-]?ME)?\b|<[^<>]*>")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A numeric option's physical range: `low` <= value <= `high` (None: no limit there), and why it stops there.

    `above`: the value must exceed `low` (a size in MiB: more than 0). `why` is shown with a value
    above `high`, `low_why` with one below `low`.

        >>> Bounds(1, 1 << 20).problem("--seq_len", 0)
        '--seq_len 0 is below 1'
        >>> Bounds(0, 1024, above=True, why="zstd's window").problem("--max_line_mb", 4096.0)
        "--max_line_mb 4096 is above 1024: zstd's window"
    """

    low: float | None = None
    high: float | None = None
    above: bool = False
    why: str = ""
    low_why: str = ""

    def problem(self, flag: str, value) -> str | None:
        """The one line refusing `value` (naming the flag), or None when it is inside the range (or None)."""
        if value is None:
            return None
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            where = f"must be above {_number(self.low)}" if self.above else f"is below {_number(self.low)}"
            why = self.low_why
        elif self.high is not None and value > self.high:
            where, why = f"is above {_number(self.high)}", self.why
        else:
            return None
        return f"{flag} {_number(value)} {where}" + (f": {why}" if why else "")


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass(frozen=True)
class Option:
    """How one dataclass field appears on the command line (and in the manifest)."""

    help: str
    parse: Callable[[Any], Any] | None = None  # the flag's text (or a TOML value) -> the field's value
    choices: tuple | None = None
    const: str | None = None  # the value of the flag given alone (`--verify_tokenizer`)
    metavar: str | None = None
    required: bool = False
    many: bool = False  # repeatable, each taking one or more values: --input a b --input c
    # Part of the output's identity (the manifest's config): True, False, or a predicate of the config
    # (recorded only when it holds, so that a job without the feature keeps its manifest's bytes).
    recorded: bool | Callable[[Any], bool] = True
    record: Callable[[Any], Any] | None = None  # the value as the manifest records it (a URL redacted)
    bounds: Bounds | None = None  # a number's physical range
    flag: str | None = None  # the flag, when not --<field name>
    shown_default: str | None = None  # the default as --help shows it, when not the value itself
    cli: bool = True  # False: set by the program, not a flag of its own


def option(default=dataclasses.MISSING, *, help: str, **kwargs) -> Any:  # noqa: A002 -- argparse's name
    """A dataclass field that is also a command-line option (see the module docstring)."""
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple or an immutable default")
    required = kwargs.pop("required", default is dataclasses.MISSING)
    field_default = None if default is dataclasses.MISSING else default
    return dataclasses.field(default=field_default, metadata={"option": Option(help, required=required, **kwargs)})


def parse_bool(value) -> bool:
    """True/false flags: `--flag`, `--flag true`, `--flag 0`, or a TOML boolean."""
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def options_of(cls, *, cli: bool = False) -> list[tuple[dataclasses.Field, Option]]:
    """The (field, Option) pairs of a dataclass, in declaration order (`cli`: only those with a flag)."""
    return [(f, f.metadata["option"]) for f in dataclasses.fields(cls)
            if "option" in f.metadata and (f.metadata["option"].cli or not cli)]


def flag(field: dataclasses.Field) -> str:
    """The command-line flag of a field."""
    return field.metadata["option"].flag or f"--{field.name}"


def _argparse_type(field: dataclasses.Field, opt: Option):
    if opt.parse is not None:
        return None  # the text is kept; values_from parses it and names the flag on error
    default = field.default
    for kind in (bool, int, float):
        if isinstance(default, kind) or field.type in (kind.__name__, f"{kind.__name__} | None"):
            return kind
    return None


def _describe(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) if value else "none"
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def declaring_class(cls, name: str) -> type:
    """The class of `cls`'s MRO that declares the field `name` (its own annotation)."""
    return _declaring(cls)[name]


@functools.cache
def _declaring(cls) -> dict[str, type]:
    """Field name -> the class declaring it, for every annotated name of `cls`'s MRO (computed once per class)."""
    out: dict[str, type] = {}
    for c in cls.__mro__:
        for name in inspect.get_annotations(c):
            out.setdefault(name, c)
    return out


def _section(cls, name: str) -> type | None:
    """The class whose `title` heads the --help section of a field: its declaring class, when titled."""
    owner = declaring_class(cls, name)
    return owner if owner.__dict__.get("title") else None


def _section_place(cls, owner: type | None) -> tuple[int, int]:
    """Where a section goes in --help: the parser's own flags first, then `cls`'s groups in the order of its bases.

    A group's parent (a layout both inputs and selection derive from) comes right after the first group
    deriving from it.
    """
    if owner is None:
        return -1, -1
    mro = cls.__mro__
    return next((i for i, c in enumerate(mro) if i and issubclass(c, owner)), 0), mro.index(owner)


def _sections(cls) -> list[tuple[type | None, list[tuple[dataclasses.Field, Option]]]]:
    """The command-line options of `cls` by --help section: (the titled group declaring them or None, options)."""
    fields = options_of(cls, cli=True)
    owners = {field.name: _section(cls, field.name) for field, _ in fields}
    order = sorted(dict.fromkeys(owners.values()), key=lambda c: _section_place(cls, c))
    return [(owner, [(f, o) for f, o in fields if owners[f.name] is owner]) for owner in order]


def add_options(parser: argparse.ArgumentParser, cls, title: str | None = None) -> None:
    """Add a flag for every option of `cls` (values stay unparsed text until `values_from`).

    With a `title`, every flag goes into one section of --help so named; without one, each flag
    goes into the section of the group that declares it (its class's `title`, in the order of
    `cls`'s bases), or among the parser's own when that class has none.
    """
    if title:
        target = parser.add_argument_group(title)
        for field, opt in options_of(cls, cli=True):
            _add_flag(parser, target, field, opt)
        return
    for owner, section in _sections(cls):
        target = parser if owner is None else parser.add_argument_group(owner.title)
        for field, opt in section:
            _add_flag(parser, target, field, opt)


def _add_flag(parser: argparse.ArgumentParser, target, field: dataclasses.Field, opt: Option) -> None:
    kind = _argparse_type(field, opt)
    help_text = opt.help
    if opt.required:
        help_text += " (required)"
    elif opt.shown_default is not None:
        help_text += f" (default: {opt.shown_default})"
    elif "default:" not in help_text:  # else the help text says what happens without the flag
        help_text += f" (default: {_describe(field.default)})"
    kwargs: dict = {"dest": field.name, "default": argparse.SUPPRESS, "help": help_text}
    if opt.choices:
        kwargs["choices"] = opt.choices
    if opt.const is not None:
        kwargs.update(nargs="?", const=opt.const)
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    if kind is bool:
        kwargs.update(nargs="?", const="true", metavar=opt.metavar or "BOOL")
    elif kind is not None:
        kwargs["type"] = kind
    if opt.many:
        kwargs.update(action="extend", nargs="+")
    target.add_argument(flag(field), **kwargs)
    if isinstance(parser, ArgumentParser):
        parser.flags.add(flag(field))


def values_from(cls, namespace: argparse.Namespace) -> dict:
    """Constructor arguments of `cls` from parsed flags: each given option, parsed; missing ones left out."""
    given = vars(namespace)
    values, missing = {}, []
    for field, opt in (pair for _, section in _sections(cls) for pair in section):  # missing flags in --help's order
        if field.name not in given:
            if opt.required:
                missing.append(flag(field))
            continue
        value = given[field.name]
        try:
            if _argparse_type(field, opt) is bool:
                value = parse_bool(value)
            elif opt.parse is not None:
                value = opt.parse(value)
        except ValueError as e:
            message = str(e)
            raise UsageError(message if message.startswith(flag(field)) else f"{flag(field)}: {message}") from None
        for number in value if opt.many and isinstance(value, list | tuple) else [value]:
            if isinstance(number, float) and not math.isfinite(number):  # argparse's float() takes nan and inf
                raise UsageError(f"{flag(field)} {number}: not a finite number")
        values[field.name] = tuple(value) if opt.many else value
    if missing:
        raise UsageError(f"missing required flag{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    return values


def check_declared(config) -> None:
    """Refuse a value outside its option's `choices` or `bounds` (ValueError naming the flag)."""
    for field, opt in options_of(type(config)):
        value = getattr(config, field.name)
        if opt.choices and value is not None and value not in opt.choices:
            raise ValueError(f"{flag(field)} must be one of {', '.join(map(str, opt.choices))}; got {value!r}")
        if opt.bounds is not None and (problem := opt.bounds.problem(flag(field), value)):
            raise ValueError(problem)


def recorded(config) -> dict:
    """The options of a config instance that are part of its output's identity, by name, as the manifest records them.

    An option is recorded when its `recorded` holds (True, or a predicate of the config) and the
    class declaring it, if it has a `recorded_when(config)`, says that its options are recorded now.
    """
    out = {}
    for field, opt in options_of(type(config)):
        when = getattr(declaring_class(type(config), field.name), "recorded_when", None)
        if not (opt.recorded(config) if callable(opt.recorded) else opt.recorded) or (when and not when(config)):
            continue
        value = getattr(config, field.name)
        out[field.name] = opt.record(value) if opt.record is not None else value
    return out


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line) instead of printing usage and exiting.

    `flags` holds every option string added through `add_argument` or `add_options` (argparse keeps
    its own list private), for suggestions and for checking a --config file's keys.
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        self.flags: set[str] = set()
        super().__init__(**kwargs)

    def add_argument(self, *args, **kwargs):
        """Argparse's add_argument, remembering the option strings."""
        self.flags.update(a for a in args if a.startswith("--"))
        return super().add_argument(*args, **kwargs)

    def error(self, message: str):
        """Raise instead of exiting: the command decides how to report it."""
        raise UsageError(message)


# Flags of the tools users arrive from, with ours for the same thing (Megatron-LM's
# tools/preprocess_data.py): suggested although the spelling is far from ours.
HABITS = {
    "--json-keys": ("--text_key", "Megatron's --json-keys names the text's key; here it is --text_key KEY, "
                    "one key per run, and --subset_key names the subset's"),
    "--output-prefix": ("--output_dir", "Megatron's --output-prefix; here --output_dir names a directory"),
    "--append-eod": ("--add_eos", "Megatron's --append-eod; here --add_eos (on by default)"),
}


def suggest(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean --x?)' for the closest candidate flag, case-insensitively, or ''."""
    candidates = sorted(set(candidates))
    habit = HABITS.get(name.lower())
    if habit and habit[0] in candidates:
        return f" (did you mean {habit[0]}? {habit[1]})"
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.75)
    return f" (did you mean {lowered[close[0]]}?)" if close else ""


def _toml_flags(table: dict, where: str, *, store_true: bool) -> list[str]:
    # store_true: Beam's boolean flags take no value (`--save_main_session`), so false means absent.
    flags = []
    for key, value in table.items():
        if isinstance(value, dict):
            raise UsageError(f"{where}: {key} is a table; give it as a value (see beam_configs/)")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool) and store_true:
                flags += [f"--{key}"] if item else []
            else:
                text = str(item).lower() if isinstance(item, bool) else str(item)
                flags.append(f"--{key}={text}")
    return flags


def config_file_flags(path: str, ours: set[str]) -> tuple[list[str], list[str]]:
    """(our flags, Beam's flags) from a TOML file with [pipeline] and [beam] tables."""
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"--config: no such file {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config {path}: not valid TOML ({e})") from None
    unknown = sorted(set(table) - {"pipeline", "beam"})
    if unknown:
        raise UsageError(f"--config {path}: unknown table(s) {unknown}; use [pipeline] and [beam]")
    pipeline = table.get("pipeline", {})
    for key in pipeline:
        if f"--{key}" not in ours:
            raise UsageError(f"--config {path}: [pipeline] has no option {key!r}{suggest('--' + key, ours)}")
    return (_toml_flags(pipeline, f"{path} [pipeline]", store_true=False),
            _toml_flags(table.get("beam", {}), f"{path} [beam]", store_true=True))


def _refuse_placeholders(path: str | None, file_flags: list[str], argv: list[str]) -> None:
    """A config file's placeholder that the command line does not replace is a UsageError."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    left = []
    for item in file_flags:
        name, _, value = item.partition("=")
        if PLACEHOLDER.search(value) and name not in given and item not in left:
            left.append(item)
    if left:
        shown = ", ".join(f"{item.split('=', 1)[0][2:]} = {item.split('=', 1)[1]!r}" for item in left)
        flags = " ".join(f"{item.split('=', 1)[0]} ..." for item in dict.fromkeys(i.split("=", 1)[0] for i in left))
        raise UsageError(f"--config {path}: placeholder value{'s' if len(left) > 1 else ''} left in the file: "
                         f"{shown}; replace {'them' if len(left) > 1 else 'it'} in the file or pass {flags}")


@dataclasses.dataclass(frozen=True)
class Runner:
    """What a command hands the flags it does not know to.

    unknown: the arguments among a list that the runner does not accept (stray values included).
    flags: the runner's flag names, for suggestions.
    """

    unknown: Callable[[list[str]], list[str]]
    flags: Callable[[], set[str]]


def parse_command_line(parser: ArgumentParser, argv: list[str],
                       runner: Runner | None = None) -> tuple[argparse.Namespace, list[str]]:
    """Apply --config, parse our flags, and check that the rest is the runner's (see the module docstring).

    Returns (our namespace, the runner's flags). Without a runner, anything left over is an error.
    The parser should declare --config (for --help); it is handled here.
    """
    namespace, rest = parse_own_flags(parser, argv)
    check_runner_flags(parser, rest, runner)
    return namespace, rest


def check_runner_flags(parser: ArgumentParser, rest: list[str], runner: Runner | None = None) -> None:
    """Refuse (UsageError) what is left of a command line after our flags that is not the runner's."""
    unknown = (runner.unknown(rest) if runner else rest) if rest else []
    for arg in unknown:
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            candidates = parser.flags | (runner.flags() if runner else set())
            raise UsageError(f"unknown flag {name}{suggest(name, candidates)}")
        raise UsageError(
            f"unexpected argument {arg!r}: quote glob patterns ('dir/*.jsonl.zst') so the shell does not "
            "expand them, or give several paths after one --input"
        )


def runner_flag(args: list[str]) -> str | None:
    """The value of the last --runner among a command's other flags (None: not given).

    As argparse reads it: any unambiguous prefix counts (at least --ru: Beam also has --requirements_file).
    """
    runner = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if len(name) >= 4 and "--runner".startswith(name):
            runner = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    return runner


def parse_own_flags(parser: ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """`parse_command_line` without the runner's check: (our namespace, everything else, unchecked)."""
    ours = parser.flags
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    file_ours, file_beam = config_file_flags(known.config, ours) if known.config else ([], [])
    if any(a == "--input" or a.startswith("--input=") for a in argv):
        # The command line's inputs replace the file's (other repeatable flags add up).
        file_ours = [a for a in file_ours if not a.startswith("--input=")]
    _refuse_placeholders(known.config, file_ours + file_beam, argv)
    namespace, rest = parser.parse_known_args(file_ours + argv)
    return namespace, file_beam + rest


def command_parser(prog: str, description: str | None, *groups,
                   config_help: str = "TOML file with [pipeline] and [beam] tables") -> ArgumentParser:
    """A command's parser: `--config FILE`, then the flags of each options class (`cls` or `(cls, title)`)."""
    parser = ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", metavar="FILE", help=config_help)
    for group in groups:
        cls, title = group if isinstance(group, tuple) else (group, None)
        add_options(parser, cls, title)
    return parser


def options_from(cls, namespace: argparse.Namespace, **extra):
    """`cls` built from parsed flags (`values_from`); a ValueError of its checks is a UsageError (exit 2)."""
    try:
        return cls(**values_from(cls, namespace), **extra)
    except UsageError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from None
