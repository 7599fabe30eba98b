"""Which document stages a command runs, and each stage's options: --filters and the stages' own flags.

Every command that reads documents (`run`, `train-tokenizer`'s sample) derives its config from
`StageChoice`. A stage's options are its own frozen dataclass (`DocumentStage.Options`, in the
stage's module); the command's parser gets a group of flags per registered stage (`add_stage_options`)
and `stage_options_from` makes the instances of those given. The manifest (or the tokenizer's card)
records a stage's options only when the stage is on, flat beside the command's own, so that a job
without stages keeps its bytes.

Stages of the user's own package (pipeline/stages/external.py) join the registry before the flags
are parsed: every `pile_pipeline.stages` entry point when a parser is made, and each
`--stage_module PKG.MODULE` of the command line (or --config file) just before it is parsed, so that
their flags parse as the built-in stages' do.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.core.documents import Schema
from pipeline.core.options import (
    ArgumentParser,
    UsageError,
    add_options,
    flag,
    option,
    options_from,
    options_of,
    recorded,
)
from pipeline.stages import external, registry
from pipeline.stages.base import DocumentStage


def parse_stage_names(values) -> tuple[str, ...]:
    """`--filters a,b --filters c` (or a TOML list) -> ("a", "b", "c"); checked against the registry later."""
    items = [values] if isinstance(values, str) else list(values)
    names = tuple(name.strip() for item in items for name in str(item).split(","))
    if any(not name for name in names):
        raise ValueError(f"--filters {','.join(names)!r}: an empty stage name")
    return names


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageChoice:
    """--filters and the chosen stages' options (instances of their `Options`), for every command reading documents."""

    filters: tuple[str, ...] = option(
        (), parse=parse_stage_names, many=True, metavar="NAMES", recorded=False,
        help="document stages to run, in this order, on each document the subset selection keeps; each on the "
        "text the one before left, the first that removes it gives the reason (listed in removed/). Names: the "
        "registered stages (docs/pipeline.md)")
    stage_options: tuple = option(
        (), cli=False, recorded=False,
        help="the stages' Options instances (from their flags); a stage without one takes its defaults")
    stage_module: tuple = option(
        (), many=True, metavar="PKG.MODULE", recorded=False,
        help="a module of your own whose DocumentStage classes become stages (named in --filters, their options "
        "flags); it must be importable here and on every worker (docs/classifiers.md)")

    def check_stages(self) -> None:
        """Refuse an unknown or repeated stage, and options of a stage that is not on (ValueError naming the flag).

        Resolves the stages on from the registry once, here: a worker that unpickles the config
        never looks them up (a stage registered at run time is in the driver's registry only).
        """
        external.load_entry_points()
        for module in self.stage_module:
            external.load_module(module)
        for name in self.filters:
            registry.stage_class(name)
        if len(set(self.filters)) != len(self.filters):
            raise ValueError(f"--filters {','.join(self.filters)}: a stage named twice")
        owners = {cls.Options: name for name, cls in registry.STAGES.items() if cls.Options is not None}
        given = {}
        for options in self.stage_options:
            name = owners.get(type(options))
            if name is None:
                raise ValueError(f"stage_options: {type(options).__name__} is no registered stage's Options")
            if name in given:
                raise ValueError(f"stage_options: two {type(options).__name__} given")
            given[name] = options

        def options_for(cls):
            return None if cls.Options is None else given[cls.name] if cls.name in given else cls.Options()

        named = [(name, registry.STAGES[name]) for name in self.filters]
        switched = [(name, cls) for name, cls in registry.STAGES.items()
                    if not cls.builtin and name not in self.filters and cls.switched_on(options_for(cls))]
        on = tuple((cls, options_for(cls)) for _, cls in named + switched)
        for name, options in given.items():
            if name not in {cls.name for cls, _ in on}:
                raise ValueError(f"{_given_flag(options)} is an option of the {name} stage, which is not on: add it "
                                 f"to --filters (--filters {name})")
        object.__setattr__(self, "_stages_on", on)

    def __getstate__(self):
        """The config as pickled: the stages of the user's own package by name (pipeline/stages/external.py).

        A process that cannot import their module (Dask's scheduler, a worker) can still unpickle it.
        """
        state = dict(self.__dict__)
        state["stage_options"] = tuple(external.carry(o) for o in self.stage_options)
        if "_stages_on" in state:
            state["_stages_on"] = tuple((external.carry(c), external.carry(o)) for c, o in state["_stages_on"])
        return state

    def __setstate__(self, state):
        state["stage_options"] = tuple(external.restore(o) for o in state["stage_options"])
        if "_stages_on" in state:
            state["_stages_on"] = tuple((external.restore(c), external.restore(o)) for c, o in state["_stages_on"])
        self.__dict__.update(state)

    def stage_names(self) -> tuple[str, ...]:
        """The stages on, in the order they run: those named in --filters, then those their own options switch on."""
        return tuple(cls.name for cls, _ in self._stages_on)

    def options_of_stage(self, name: str):
        """The options of a stage that is on: the instance given, else its Options' defaults (None without Options)."""
        for cls, options in self._stages_on:
            if cls.name == name:
                return options
        raise KeyError(f"stage {name} is not on")

    def configured_stages(self) -> tuple[DocumentStage, ...]:
        """The stages on, each made with its options (set up later, on the workers)."""
        return tuple(external.instance(cls, options) for cls, options in self._stages_on)

    def with_stage_keys(self, layout: Schema) -> Schema:
        """`layout` with the keys the stages on read from each line (`DocumentStage.line_keys`), made once.

        A config's `schema` is this; it is made in the driver (a worker unpickles it and never asks a
        stage). Before the stages are resolved (while the groups check themselves): the layout alone.
        """
        if "_stages_on" not in self.__dict__:
            return layout
        cached = self.__dict__.get("_schema")
        if cached is None:
            keys = tuple(dict.fromkeys(key for stage in self.configured_stages() for key in stage.line_keys()))
            cached = dataclasses.replace(layout, extra_keys=keys)
            object.__setattr__(self, "_schema", cached)
        return cached

    def check_stages_ready(self) -> None:
        """Each stage on's own check (`DocumentStage.check`), in the driver before the job starts."""
        for stage in self.configured_stages():
            stage.check()

    def stages_json(self) -> dict:
        """What the manifest (or card) records of the stages: nothing without any; else --filters, their options."""
        if not self._stages_on:
            return {}
        out: dict = {"filters": list(self.filters)}
        if self.stage_module:
            out["stage_module"] = list(self.stage_module)
        for _, options in self._stages_on:
            if options is not None:
                out.update({k: list(v) if isinstance(v, tuple) else v for k, v in recorded(options).items()})
        return out


def _given_flag(options) -> str:
    """The flag of the first option that differs from its default (the first option's when none does)."""
    fields = [f for f, _ in options_of(type(options))]
    for field in fields:
        if getattr(options, field.name) != field.default:
            return flag(field)
    return flag(fields[0])


def add_stage_options(parser: ArgumentParser) -> None:
    """A group of flags per registered stage with options (after the command's own); a flag taken already is refused.

    The stages of installed entry points are registered first; those of the --stage_module modules
    named in the arguments are registered, and their flags added, when the parser parses them.
    """
    external.load_entry_points()
    added: set[str] = set()
    _add_groups(parser, added)
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        for module in _stage_modules(args):
            try:
                external.load_module(module)
            except ValueError as e:
                raise UsageError(str(e)) from None
        _add_groups(parser, added)
        return parse(args, namespace)

    parser.parse_known_args = parse_known_args  # argparse's parse_args calls it too


def _stage_modules(args) -> list[str]:
    """The values of --stage_module in a command line (`--stage_module A B`, `--stage_module=A`)."""
    args, out, taking = list(args or ()), [], False
    for arg in args:
        if arg == "--stage_module":
            taking = True
        elif arg.startswith("--stage_module="):
            out.append(arg.split("=", 1)[1])
            taking = False
        elif taking and not arg.startswith("-"):
            out.append(arg)
        else:
            taking = False
    return out


def _add_groups(parser: ArgumentParser, added: set[str]) -> None:
    for name, cls in registry.STAGES.items():
        if cls.Options is None or name in added:
            continue
        clash = sorted(parser.flags & {flag(f) for f, _ in options_of(cls.Options, cli=True)})
        if clash:
            raise ValueError(f"stage {name}: flag(s) {clash} are the command's own already")
        add_options(parser, cls.Options, title=f"stage {name}")
        added.add(name)


def stage_options_from(namespace: argparse.Namespace) -> tuple:
    """The Options instance of every stage with a flag given (UsageError naming the flag on a bad value)."""
    given = vars(namespace)
    out = []
    for cls in registry.STAGES.values():
        if cls.Options is not None and any(f.name in given for f, _ in options_of(cls.Options, cli=True)):
            out.append(options_from(cls.Options, namespace))
    return tuple(out)
