"""A command's options in groups: each group checks itself, says when it is recorded and names its --help section.

A group is a frozen, keyword-only dataclass deriving from `OptionGroup`, whose fields are
`option`s (pipeline/core/options.py); a command's config derives from its groups, so every option
stays one flat attribute and one constructor keyword of the config:

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class DedupOptions(OptionGroup):
        title = "dedup"                                   # its section of --help
        dedup: str = option("none", choices=("none", "exact"), help="...")
        minhash_rows: int = option(18, bounds=Bounds(1, 4096), help="...")

        def check(self):                                  # what its own options cannot be together
            ...

        def recorded_when(self) -> bool:                  # its options enter the manifest only when on
            return self.dedup != "none"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class JobConfig(InputOptions, DedupOptions): ...

Constructing a group, or a config made of groups, runs `check_groups`: every option's choices and
bounds (`check_declared`), then each group's own `check`, parents before children, each group's
rules written once in its own class. A config with rules across its groups defines
`__post_init__`, calls `check_groups(self)` and then checks those rules, in one place.
"""

from __future__ import annotations

from pipeline.core.options import check_declared


class OptionGroup:
    """Base of an option group (see the module docstring)."""

    title = None  # its section of --help; no annotation, so never a dataclass field

    def __post_init__(self):
        check_groups(self)

    def check(self) -> None:
        """Refuse (ValueError naming the flag) values of this group's options that cannot be together."""

    def recorded_when(self) -> bool:
        """Whether this group's recorded options go into the manifest now (by default, always)."""
        return True


def groups_of(cls) -> list[type]:
    """The option groups `cls` is made of, parents before the groups that derive from them."""
    return [c for c in reversed(cls.__mro__) if isinstance(c, type) and issubclass(c, OptionGroup)
            and c is not OptionGroup]


def check_groups(config) -> None:
    """Every option's choices and bounds, then each group's own `check` (ValueError naming the flag)."""
    check_declared(config)
    for group in groups_of(type(config)):
        own = group.__dict__.get("check")  # a group's own rules only: an inherited check runs once, for its owner
        if own is not None:
            own(config)
