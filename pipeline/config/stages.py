"""Which document stages a command runs, and each stage's options: --filters and the stages' own flags.

Every command that reads documents (`run`, `train-tokenizer`'s sample) derives its config from
`StageChoice`. A stage's options are its own frozen dataclass (`DocumentStage.Options`, in the
stage's module); the command's parser gets a group of flags per registered stage (`add_stage_options`)
and `stage_options_from` makes the instances of those given. The manifest (or the tokenizer's card)
records a stage's options only when the stage is on, flat beside the command's own, so that a job
without stages keeps its bytes.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.core.options import ArgumentParser, add_options, flag, option, options_from, options_of, recorded
from pipeline.stages import registry
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

    def check_stages(self) -> None:
        """Refuse an unknown or repeated stage, and options of a stage that is not on (ValueError naming the flag)."""
        for name in self.filters:
            registry.stage_class(name)
        if len(set(self.filters)) != len(self.filters):
            raise ValueError(f"--filters {','.join(self.filters)}: a stage named twice")
        owners = {cls.Options: name for name, cls in registry.STAGES.items() if cls.Options is not None}
        seen = set()
        for options in self.stage_options:
            name = owners.get(type(options))
            if name is None:
                raise ValueError(f"stage_options: {type(options).__name__} is no registered stage's Options")
            if name in seen:
                raise ValueError(f"stage_options: two {type(options).__name__} given")
            seen.add(name)
        on = set(self.stage_names())
        for options in self.stage_options:
            name = owners[type(options)]
            if name not in on:
                given = _given_flag(options)
                raise ValueError(f"{given} is an option of the {name} stage, which is not on: add it to --filters "
                                 f"(--filters {name})")

    def options_of_stage(self, name: str):
        """The options of a stage: the instance given, else its Options' defaults (None without Options)."""
        cls = registry.STAGES[name]
        if cls.Options is None:
            return None
        for options in self.stage_options:
            if type(options) is cls.Options:
                return options
        return cls.Options()

    def stage_names(self) -> tuple[str, ...]:
        """The stages on, in the order they run: those named in --filters, then those their own options switch on."""
        named = tuple(self.filters)
        switched = tuple(name for name, cls in registry.STAGES.items()
                         if not cls.builtin and name not in named and cls.switched_on(self.options_of_stage(name)))
        return named + switched

    def configured_stages(self) -> tuple[DocumentStage, ...]:
        """The stages on, each made with its options (set up later, on the workers)."""
        return tuple(registry.STAGES[name](self.options_of_stage(name)) for name in self.stage_names())

    def stages_json(self) -> dict:
        """What the manifest (or card) records of the stages: nothing without any; else --filters, their options."""
        names = self.stage_names()
        if not names:
            return {}
        out: dict = {"filters": list(self.filters)}
        for name in names:
            options = self.options_of_stage(name)
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
    """A group of flags per registered stage with options (after the command's own); a flag taken already is refused."""
    for name, cls in registry.STAGES.items():
        if cls.Options is None:
            continue
        clash = sorted(parser.flags & {flag(f) for f, _ in options_of(cls.Options, cli=True)})
        if clash:
            raise ValueError(f"stage {name}: flag(s) {clash} are the command's own already")
        add_options(parser, cls.Options, title=f"stage {name}")


def stage_options_from(namespace: argparse.Namespace) -> tuple:
    """The Options instance of every stage with a flag given (UsageError naming the flag on a bad value)."""
    given = vars(namespace)
    out = []
    for cls in registry.STAGES.values():
        if cls.Options is not None and any(f.name in given for f, _ in options_of(cls.Options, cli=True)):
            out.append(options_from(cls.Options, namespace))
    return tuple(out)
