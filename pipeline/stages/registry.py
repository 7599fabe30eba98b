"""Every document stage by name: one row per stage (`STAGES`), the options' flags they bring.

A new stage is one module and one row here. `register` adds one at run time (a test, a user's own
stage) with the same checks. The order of `STAGES` is the order in which stages that their own
options switch on run (after those named in --filters, in the order named).
"""

from __future__ import annotations

import dataclasses

from pipeline.core.options import options_of
from pipeline.stages.base import FILTERED, REMOVED, DocumentStage
from pipeline.stages.c4_quality import C4Quality
from pipeline.stages.fasttext_classifier import FastTextClassifier
from pipeline.stages.fineweb_quality import FineWebQuality
from pipeline.stages.gopher_quality import GopherQuality
from pipeline.stages.gopher_repetition import GopherRepetition
from pipeline.stages.hf_classifier import HfClassifier
from pipeline.stages.language import Language
from pipeline.stages.pii import Pii
from pipeline.stages.rules import DEDUP_REASONS, EmptyText, SubsetSelection
from pipeline.stages.url_filter import UrlFilter

STAGES: dict[str, type[DocumentStage]] = {}
# Reasons the job writes without a stage class of its own (dedup's), so no stage may take them.
RESERVED = frozenset(DEDUP_REASONS)


def register(cls: type[DocumentStage]) -> type[DocumentStage]:
    """Add a stage class (usable as a decorator); refuses a name or an option flag already taken."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ValueError(f"{cls.__name__}: a stage's name is a lower-case identifier, got {name!r}")
    if name in STAGES or name in RESERVED or any(name == c.name + "_cut" or c.name == name + "_cut"
                                                 for c in STAGES.values()):
        raise ValueError(f"stage name {name!r} is taken")
    if cls.counts_as not in (REMOVED, FILTERED):
        raise ValueError(f"stage {name}: counts_as is {REMOVED!r} or {FILTERED!r}")
    if cls.Options is not None:
        if not dataclasses.is_dataclass(cls.Options) or not cls.Options.__dataclass_params__.frozen:
            raise ValueError(f"stage {name}: Options must be a frozen dataclass")
        fields = [f for f, _ in options_of(cls.Options)]
        if len(fields) != len(dataclasses.fields(cls.Options)):
            raise ValueError(f"stage {name}: declare every field of its Options with core.options.option()")
        missing = [f.name for f, opt in options_of(cls.Options) if opt.required]
        if missing:
            raise ValueError(f"stage {name}: options {missing} need a default (a stage is off unless chosen)")
        taken = option_names()
        clash = sorted({f.name for f in fields} & set(taken))
        if clash:
            raise ValueError(f"stage {name}: option(s) {clash} already belong to stage {taken[clash[0]]}")
    STAGES[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a stage added by `register` (tests)."""
    if STAGES[name].builtin:
        raise ValueError(f"{name} is a built-in rule")
    del STAGES[name]


def option_names() -> dict[str, str]:
    """{option field name: stage name} of every registered stage's options."""
    return {f.name: name for name, cls in STAGES.items() if cls.Options is not None
            for f in dataclasses.fields(cls.Options)}


def stage_class(name: str) -> type[DocumentStage]:
    """The class of a stage a user can choose; a ValueError names the choices otherwise."""
    cls = STAGES.get(name)
    if cls is None or cls.builtin:
        raise ValueError(f"no stage named {name!r}; the stages: {', '.join(choices()) or 'none registered'}")
    return cls


def choices() -> list[str]:
    """The names --filters accepts, in registry order."""
    return [name for name, cls in STAGES.items() if not cls.builtin]


# The rows: the built-in rules, then each stage a user can name in --filters (one row per stage);
# language and pii, which their own flags turn on, run after the stages --filters names, in this order.
for _stage in (SubsetSelection, EmptyText, GopherQuality, GopherRepetition, C4Quality, FineWebQuality, Language, Pii):
    register(_stage)
# The classifiers and the URL filter: a model or lists of the user's decide (docs/classifiers.md).
for _stage in (UrlFilter, FastTextClassifier, HfClassifier):
    register(_stage)
