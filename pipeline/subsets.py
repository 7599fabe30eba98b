"""The Pile's 22 subset names and the named selections and epoch presets built on them."""

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


def check_subset_names(names, what: str) -> None:
    """Raise ValueError naming any string that is not one of the 22 Pile subsets."""
    unknown = sorted(set(names) - set(PILE_SUBSETS))
    if unknown:
        raise ValueError(
            f"{what}: unknown Pile subset name(s) {unknown}; use the exact `pile_set_name` strings: "
            f"{', '.join(PILE_SUBSETS)}"
        )
