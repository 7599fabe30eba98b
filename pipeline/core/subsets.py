"""The Pile's 22 subset names, their sizes, and the named selections and epoch presets built on them."""

from __future__ import annotations

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


def check_subset_names(names, what: str) -> None:
    """Raise ValueError naming any string that is not one of the 22 Pile subsets."""
    unknown = sorted(set(names) - set(PILE_SUBSETS))
    if unknown:
        raise ValueError(
            f"{what}: unknown Pile subset name(s) {unknown}; use the exact `pile_set_name` strings: "
            f"{', '.join(PILE_SUBSETS)}"
        )


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
