"""The ranges of the stages' options, checked when a stage's Options is made.

A value outside its option's meaning (a negative threshold, a share above 1, a C4 count below the
-1 that turns its rule off) would make a stage remove every document, or none, and the job end
with "wrote no records": each Options dataclass refuses it in `__post_init__` with one line naming
the flag, which the command turns into exit status 2.

    >>> SHARE.problem("--fineweb_short_line_thr", 5.0)
    '--fineweb_short_line_thr 5 is above 1 (a share: 0 to 1)'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Range:
    """low <= value <= high (None: no limit there); `off`, a value outside them that turns the rule off."""

    low: float | None = None
    high: float | None = None
    off: float | None = None
    meaning: str = ""  # what the value is, said with a refusal

    def problem(self, flag: str, value) -> str | None:
        """The one line refusing `value` (naming the flag), or None when the value is in range."""
        if self.off is not None and value == self.off:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"{flag} {value}: not a finite number"
        if self.low is not None and value < self.low:
            where = f"is below {self.low:g}"
        elif self.high is not None and value > self.high:
            where = f"is above {self.high:g}"
        else:
            return None
        why = ", ".join(part for part in (self.meaning, f"{self.off:g} turns it off" if self.off is not None else "")
                        if part)
        return f"{flag} {value:g} {where}" + (f" ({why})" if why else "")


SHARE = Range(0, 1, meaning="a share: 0 to 1")
AT_LEAST_0 = Range(0, meaning="0 or more")
C4_COUNT = Range(0, off=-1, meaning="0 or more")


def check_ranges(options, ranges: Mapping[str, Range]) -> None:
    """Refuse (ValueError naming the flag) the first option of `options` outside its range."""
    for name, bounds in ranges.items():
        problem = bounds.problem(f"--{name}", getattr(options, name))
        if problem:
            raise ValueError(problem)
