"""The Pile's 22 subset names, their sizes, the named selections and epoch presets built on them.

A job accepts either the Pile's names only (`--subset_names pile`) or any names (`any`, for other
corpora). Presets are about Pile names in both cases: `uncopyrighted` drops the five copyrighted
Pile subsets (and, with any names, keeps every other name), `pile_paper` sets the epochs of Pile
subsets (other names get 1).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections.abc import Iterable

# The `meta.pile_set_name` strings exactly as they appear in the data (not the paper code's names).
PILE_SUBSETS: tuple[str, ...] = (
    "Pile-CC",
    "PubMed Central",
    "Books3",
    "OpenWebText2",
    "ArXiv",
    "Github",
    "FreeLaw",
    "StackExchange",
    "USPTO Backgrounds",
    "PubMed Abstracts",
    "Gutenberg (PG-19)",
    "OpenSubtitles",
    "Wikipedia (en)",
    "DM Mathematics",
    "Ubuntu IRC",
    "BookCorpus2",
    "EuroParl",
    "HackerNews",
    "YoutubeSubtitles",
    "PhilPapers",
    "NIH ExPorter",
    "Enron Emails",
)

# The widely used "uncopyrighted" variant drops these five.
COPYRIGHTED_SUBSETS: tuple[str, ...] = (
    "Books3",
    "BookCorpus2",
    "OpenSubtitles",
    "YoutubeSubtitles",
    "OpenWebText2",
)

SUBSET_PRESETS: dict[str, tuple[str, ...]] = {
    "all": PILE_SUBSETS,
    "uncopyrighted": tuple(s for s in PILE_SUBSETS if s not in COPYRIGHTED_SUBSETS),
}

# Gao et al. 2020, Table 1: epochs per subset used to train on the Pile (825 GiB raw -> 1254 GiB).
PILE_PAPER_EPOCHS: dict[str, float] = {
    "Pile-CC": 1.0,
    "PubMed Central": 2.0,
    "Books3": 1.5,
    "OpenWebText2": 2.0,
    "ArXiv": 2.0,
    "Github": 1.0,
    "FreeLaw": 1.5,
    "StackExchange": 2.0,
    "USPTO Backgrounds": 2.0,
    "PubMed Abstracts": 2.0,
    "Gutenberg (PG-19)": 2.5,
    "OpenSubtitles": 1.5,
    "Wikipedia (en)": 3.0,
    "DM Mathematics": 2.0,
    "Ubuntu IRC": 2.0,
    "BookCorpus2": 1.5,
    "EuroParl": 2.0,
    "HackerNews": 2.0,
    "YoutubeSubtitles": 2.0,
    "PhilPapers": 2.0,
    "NIH ExPorter": 2.0,
    "Enron Emails": 2.0,
}

EPOCH_PRESETS: dict[str, dict[str, float]] = {"pile_paper": PILE_PAPER_EPOCHS}

# Gao et al. 2020, Table 1: raw size of each subset in GiB. Times PILE_PAPER_EPOCHS this gives the
# "effective size" the paper trained on (825.18 GiB raw -> 1254.20 GiB effective).
PILE_RAW_GIB: dict[str, float] = {
    "Pile-CC": 227.12,
    "PubMed Central": 90.27,
    "Books3": 100.96,
    "OpenWebText2": 62.77,
    "ArXiv": 56.21,
    "Github": 95.16,
    "FreeLaw": 51.15,
    "StackExchange": 32.20,
    "USPTO Backgrounds": 22.90,
    "PubMed Abstracts": 19.26,
    "Gutenberg (PG-19)": 10.88,
    "OpenSubtitles": 12.98,
    "Wikipedia (en)": 6.38,
    "DM Mathematics": 7.75,
    "Ubuntu IRC": 5.52,
    "BookCorpus2": 6.30,
    "EuroParl": 4.59,
    "HackerNews": 3.90,
    "YoutubeSubtitles": 3.73,
    "PhilPapers": 2.38,
    "NIH ExPorter": 1.89,
    "Enron Emails": 0.88,
}


def pile_mix_weights() -> dict[str, float]:
    """The Pile's effective mix: raw GiB x paper epochs per subset (not normalized)."""
    return {name: PILE_RAW_GIB[name] * PILE_PAPER_EPOCHS[name] for name in PILE_SUBSETS}


MAX_SUBSET_CHARS = 200  # a longer "name" is a mistaken --subset_key (an id, a text), not a subset
ALL_NAMES = "*"  # a selection of every name the data holds (with --subset_names any)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def suggest_name(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'X'?)' naming the closest candidates, case-insensitively, or ''."""
    lowered = {c.lower(): c for c in candidates}
    key = name.strip().lower()
    if key in lowered:
        close = [key]
    else:
        close = [c for c in lowered if c.startswith(key)] if len(key) >= 3 else []
        close = close or difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(lowered[c]) for c in sorted(close)[:3])}?)"


@functools.lru_cache(maxsize=4096)  # a corpus repeats its few names on millions of lines
def subset_name_problem(name: str, any_names: bool) -> str | None:
    """Why `name` cannot be a subset name (None when it can): not a Pile name, empty, too long, control chars."""
    if not any_names:
        if name in PILE_SUBSETS:
            return None
        return (f"{name[:60]!r} is not a Pile subset name{suggest_name(name, PILE_SUBSETS)}; "
                "pass --subset_names any to accept any name")
    if not name.strip():
        return "an empty name"
    if len(name) > MAX_SUBSET_CHARS:
        return f"a name of {len(name)} characters (at most {MAX_SUBSET_CHARS}: is --subset_key right?)"
    if _CONTROL.search(name):
        return f"{name[:60]!r} holds control characters"
    return None


def check_subset_names(names, what: str, any_names: bool = False) -> None:
    """Raise ValueError naming every string that cannot be a subset name, with close Pile names."""
    problems = [p for p in (subset_name_problem(str(n), any_names) for n in dict.fromkeys(names)) if p]
    if not problems:
        return
    if any_names:
        raise ValueError(f"{what}: {'; '.join(problems)}")
    unknown = [f"{str(n)!r}{suggest_name(str(n), PILE_SUBSETS)}" for n in dict.fromkeys(names) if n not in PILE_SUBSETS]
    raise ValueError(
        f"{what}: unknown Pile subset name{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; use the exact "
        f"`pile_set_name` strings ({', '.join(PILE_SUBSETS)}) or pass --subset_names any to accept any name"
    )


@dataclasses.dataclass(frozen=True)
class Selection:
    """The subsets a job keeps: `name in selection`.

    names: the selected names; every: all names instead (with --subset_names any); excluded: never.
    """

    names: frozenset[str] = frozenset()
    every: bool = False
    excluded: frozenset[str] = frozenset()

    def __contains__(self, name: str) -> bool:
        return (self.every or name in self.names) and name not in self.excluded


def _canonical(names: Iterable[str]) -> tuple[str, ...]:
    # Pile names in the Pile's order, then any others sorted: the same selection, the same tuple.
    order = {name: i for i, name in enumerate(PILE_SUBSETS)}
    return tuple(sorted(set(names), key=lambda n: (order.get(n, len(order)), n)))


def parse_selection(value) -> tuple[str, ...]:
    """`--subsets` as given: a preset name ('all', 'uncopyrighted') or the names of a comma list.

    Presets are resolved by `resolve_selection`, which knows whether any names are accepted.
    """
    if isinstance(value, tuple | list):
        return tuple(value)
    if value in ("", None):
        return ("all",)
    return tuple(_names(value))


def resolve_selection(subsets, exclude, any_names: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(subsets, exclude_subsets) of a config, canonical; raises ValueError naming a bad name.

    With Pile names the result is the explicit list of selected names (exclusions applied) and no
    exclusions. With any names, 'all' and 'uncopyrighted' become (ALL_NAMES,) plus the exclusions;
    a list stays a list, exclusions applied.
    """
    subsets, exclude = tuple(subsets), tuple(exclude)
    every = subsets in (("all",), (ALL_NAMES,)) and any_names
    if subsets == ("uncopyrighted",) and any_names:
        every, exclude = True, exclude + COPYRIGHTED_SUBSETS
    elif not every:
        subsets = SUBSET_PRESETS[subsets[0]] if len(subsets) == 1 and subsets[0] in SUBSET_PRESETS else subsets
        check_subset_names(subsets, "--subsets", any_names)
    check_subset_names(exclude, "--exclude_subsets", any_names)
    if every:
        return (ALL_NAMES,), _canonical(exclude)
    chosen = _canonical(set(subsets) - set(exclude))
    if not chosen:
        raise ValueError("The subset selection is empty: check --subsets and --exclude_subsets")
    return chosen, ()


def _names(value: str) -> list[str]:
    return [s.strip() for s in str(value).split(",") if s.strip()]


def parse_subsets(value) -> tuple[str, ...]:
    """`--subsets`: a preset name ('all', 'uncopyrighted') or a comma list, in canonical order."""
    if isinstance(value, tuple | list):
        names = list(value)
    elif value in ("", None):
        names = list(PILE_SUBSETS)
    elif value in SUBSET_PRESETS:
        names = list(SUBSET_PRESETS[value])
    else:
        names = _names(value)
    check_subset_names(names, "--subsets")
    return tuple(s for s in PILE_SUBSETS if s in set(names))


def parse_names(value) -> tuple[str, ...]:
    """A comma list of subset names, unchecked (checked once the accepted names are known)."""
    return tuple(value) if isinstance(value, tuple | list) else tuple(_names(value))


def parse_exclude(value) -> tuple[str, ...]:
    """`--exclude_subsets`: a comma list of subset names."""
    names = list(value) if isinstance(value, tuple | list) else _names(value)
    check_subset_names(names, "--exclude_subsets")
    return tuple(names)


def parse_epochs(value) -> tuple[tuple[str, float], ...]:
    """`--epochs`: a preset name (`pile_paper`), 'none', or `Name=2,Other Name=1.5`."""
    if not value or value == "none":
        return ()
    if value in EPOCH_PRESETS:
        return tuple(sorted(EPOCH_PRESETS[value].items()))
    pairs = []
    for item in str(value).split(","):
        name, sep, number = item.rpartition("=")
        if not sep:
            raise ValueError(f"--epochs: {item!r} is not NAME=EPOCHS (presets: {', '.join(sorted(EPOCH_PRESETS))})")
        try:
            pairs.append((name.strip(), float(number)))
        except ValueError:
            raise ValueError(f"--epochs: {number.strip()!r} is not a number (in {item!r})") from None
    return tuple(sorted(pairs))
