"""`PipelineConfig`'s option groups: each checks itself alone, the rules across groups, bounds, what is recorded.

The manifest's bytes are pinned by tests/test_output_pinned.py (slow); here the recorded options
of small configs, which decide them, are checked without running a job.
"""

from __future__ import annotations

import argparse
import dataclasses
import doctest

import pytest

from pipeline.cli import run
from pipeline.config.dedup import DedupOptions
from pipeline.config.execution import ExecutionOptions
from pipeline.config.inputs import DocumentLayout, InputOptions
from pipeline.config.job import PipelineConfig
from pipeline.config.output import OutputOptions
from pipeline.config.packing import PackingOptions
from pipeline.config.selection import SelectionOptions
from pipeline.config.tokenizing import TokenizerOptions
from pipeline.core import options
from pipeline.core.option_groups import OptionGroup, check_groups, groups_of
from pipeline.core.options import Bounds, UsageError, option, recorded

JOB = {"inputs": ("x",), "output_dir": "o", "tokenizer_model": "m"}


def test_the_options_doctests():
    assert doctest.testmod(options).failed == 0


# Each group alone: (group, its arguments, the start of its refusal). None: accepted.
ALONE = [
    (InputOptions, {"inputs": ()}, "No --input given"),
    (InputOptions, {"inputs": ("x",), "chunk_mb": 0.0}, "--chunk_mb 0 must be above 0"),
    (InputOptions, {"inputs": ("x",), "max_line_mb": 1025.0}, "--max_line_mb 1025 is above 1024: a zstd window"),
    (InputOptions, {"inputs": ("x",), "id_key": "text"}, "--id_key 'text' is also --text_key"),
    (InputOptions, {"inputs": ("x",), "on_corrupt_file": "ignore"}, "--on_corrupt_file must be one of fail, skip"),
    (InputOptions, {"inputs": ("x",), "default_subset": "pile-cc"}, "--default_subset: 'pile-cc' is not a Pile"),
    (InputOptions, {"inputs": ("x",), "max_line_mb": 1024.0, "chunk_mb": 1024.0}, None),
    (SelectionOptions, {"subsets": ("Github",), "epochs": (("Github", 101.0),)}, "--epochs: Github=101.0 must be"),
    (SelectionOptions, {"epochs": (("Nope", 2.0),)}, "--epochs: unknown Pile subset name"),
    (SelectionOptions, {"subset_names": "any", "epochs": (("Nope", 2.0),)}, None),
    (SelectionOptions, {"seed": 1 << 63}, "--seed 9223372036854775808 is above"),
    (TokenizerOptions, {"tokenizer_model": "m", "eos_id": -1}, "--eos_id -1 is below 0: a token id is >= 0"),
    (TokenizerOptions, {"tokenizer_model": "m", "pad_id": 1 << 31}, "--pad_id 2147483648 is above 2147483647"),
    (TokenizerOptions, {"tokenizer_model": "m", "tokenizer_backend": "fastest"}, "--tokenizer_backend must be one"),
    (PackingOptions, {"seq_len": 0}, "--seq_len 0 is below 1"),
    (PackingOptions, {"seq_len": (1 << 20) + 1}, "--seq_len 1048577 is above 1048576"),
    (PackingOptions, {"packing_window": 0}, "--packing_window 0 is below 1"),
    (PackingOptions, {"packing_window": 1 << 32}, "--packing_window 4294967296 is above 4294967295: best fit"),
    (PackingOptions, {"packing": "best_fit", "packing_window": (1 << 32) - 1}, None),
    (OutputOptions, {"output_dir": " "}, "--output_dir is empty"),
    (OutputOptions, {"output_dir": "o", "split": "a-b"}, "--split 'a-b': use letters"),
    (OutputOptions, {"output_dir": "o", "shard_size_mb": -1.0}, "--shard_size_mb -1 must be above 0"),
    (OutputOptions, {"output_dir": "o", "shard_size_mb": 6e6}, "--shard_size_mb 6e+06 is above 5242880: 5 TiB"),
    (OutputOptions, {"output_dir": "o", "output_format": "megatron", "per_subset": True}, None),
    (DedupOptions, {"dedup": "near", "minhash_bands": 8}, "--minhash_bands x --minhash_rows (8 x 18) must be"),
    (DedupOptions, {"decontam_cut": True}, "--decontam_cut needs --decontaminate"),
    (DedupOptions, {"minhash_num_perm": 5000}, "--minhash_num_perm 5000 is above 4096"),
    (DedupOptions, {"minhash_ngram": 0}, "--minhash_ngram 0 is below 1"),
    (DedupOptions, {"decontam_ngram": 257}, "--decontam_ngram 257 is above 256"),
    (DedupOptions, {"decontam_max_ngrams": 0}, "--decontam_max_ngrams 0 is below 1"),
    (DedupOptions, {"dedup_rounds": 65}, "--dedup_rounds 65 is above 64"),
    (DedupOptions, {"dedup_verify_jaccard": 0.0}, "--dedup_verify_jaccard 0 must be above 0"),
    (DedupOptions, {"dedup_verify_jaccard": 1.5}, "--dedup_verify_jaccard 1.5 is above 1"),
    (ExecutionOptions, {"tokenizer_threads": 0}, "--tokenizer_threads 0 is below 1"),
    (ExecutionOptions, {"progress_every": -1.0}, "--progress_every -1 is below 0"),
    (ExecutionOptions, {"fan_out": "maybe"}, "--fan_out must be one of auto, yes, no"),
]


@pytest.mark.parametrize("group,kwargs,refusal", ALONE, ids=[f"{g.__name__}-{'-'.join(k)}" for g, k, _ in ALONE])
def test_each_group_checks_itself_alone(group, kwargs, refusal):
    if refusal is None:
        group(**kwargs)
        return
    with pytest.raises(ValueError) as refused:
        group(**kwargs)
    assert str(refused.value).startswith(refusal), str(refused.value)
    # The job's config refuses the same, with the same line: the group's rule is written once.
    with pytest.raises(ValueError) as whole:
        PipelineConfig(**{**JOB, **kwargs})
    assert str(whole.value) == str(refused.value)


def test_a_group_normalizes_its_own_options():
    assert PackingOptions(packing="best_fit").document_boundaries  # read through its segment ids
    selection = SelectionOptions(subsets=("uncopyrighted",), exclude_subsets=("Github",))
    assert "Books3" not in selection.subsets and "Github" not in selection.selection()
    assert DocumentLayout(default_subset="notes").subset_names == "any"  # a name of one's own implies any


@pytest.mark.parametrize("kwargs,refusal", [
    ({"output_format": "megatron", "packing": "best_fit"}, "--packing best_fit is for packed TFRecords"),
    ({"output_format": "megatron", "document_boundaries": True}, "--document_boundaries is for packed TFRecords"),
    ({"per_subset": True, "subset_names": "any"}, "--per_subset with --subset_names any needs the subsets named"),
])
def test_the_rules_across_groups(kwargs, refusal):
    with pytest.raises(ValueError, match=refusal):
        PipelineConfig(**{**JOB, **kwargs})
    # Each group alone takes its part: the rule is one of the config's, between the groups.
    for group in (OutputOptions, PackingOptions, InputOptions, SelectionOptions):
        own = {k: v for k, v in {**JOB, **kwargs}.items() if k in {f.name for f in dataclasses.fields(group)}}
        group(**own)


def test_the_rules_across_groups_allow_what_fits():
    assert PipelineConfig(**JOB, output_format="megatron", per_subset=True).per_subset
    assert PipelineConfig(**JOB, per_subset=True, subsets=("Github", "ArXiv")).per_subset


@pytest.mark.parametrize("flag,value", [
    ("--chunk_mb", "2048"), ("--chunk_mb", "0"), ("--max_line_mb", "4096"), ("--packing_window", "0"),
    ("--packing_window", "99999999999"), ("--decontam_ngram", "0"), ("--decontam_max_ngrams", "99999999999"),
    ("--minhash_num_perm", "0"), ("--minhash_bands", "100000"), ("--minhash_rows", "-1"),
    ("--minhash_seed", "99999999999999999999"), ("--shard_size_mb", "0"), ("--shard_size_mb", "1e9"),
    ("--seq_len", "-5"), ("--tokenizer_threads", "100000"), ("--dedup_rounds", "0"), ("--pad_id", "-2"),
])
def test_a_number_past_its_physical_limit_is_refused_naming_the_flag(flag, value):
    with pytest.raises(UsageError) as refused:
        run.parse_args(["--input", "x", "--output_dir", "o", "--tokenizer_model", "m", flag, value])
    line = str(refused.value)
    assert line.startswith(f"{flag} ") and ("is above" in line or "is below" in line or "must be above" in line)
    assert "\n" not in line


def _config(**kwargs) -> dict:
    return PipelineConfig(**{**JOB, **kwargs}).to_json()


DEFAULT_KEYS = ["add_bos", "add_eos", "bos_id", "chunk_mb", "default_subset", "document_boundaries", "eos_id",
                "epochs", "exclude_subsets", "inputs", "max_line_mb", "on_corrupt_file", "remainder", "seed",
                "seq_len", "shard_size_mb", "split", "subset_key", "subset_names", "subsets", "text_key",
                "tokenizer_backend", "tokenizer_model", "verify_tokenizer"]
DEDUP_KEYS = ["decontam_cut", "decontam_max_ngrams", "decontam_ngram", "decontam_text_key", "decontaminate", "dedup",
              "dedup_normalization", "dedup_rounds", "dedup_verify_jaccard", "minhash_bands", "minhash_ngram",
              "minhash_num_perm", "minhash_rows", "minhash_seed"]


def test_what_the_manifest_records_of_the_default_job():
    assert sorted(_config()) == DEFAULT_KEYS
    # Where things are and how the work spreads never decide the bytes.
    assert sorted(_config(provenance=True, overwrite=True, fan_out="no", tokenizer_threads=3, progress_every=0.0,
                          max_dead_letter_fraction=1.0, pad_id=0, allow_text_eos=True, tiktoken_encoding="llama3",
                          output_dir="elsewhere")) == DEFAULT_KEYS


def test_each_output_format_records_what_decides_its_bytes():
    """Declared on the options: packing for packed records alone, the format and --per_subset where they matter."""
    unpacked = sorted(set(DEFAULT_KEYS) - {"seq_len", "remainder", "document_boundaries"})
    assert sorted(_config(output_format="megatron", per_subset=True)) == sorted(unpacked + ["output_format",
                                                                                           "per_subset"])
    megatron = _config(output_format="megatron")
    assert (megatron["output_format"], megatron["per_subset"]) == ("megatron", False)
    text = _config(output_format="jsonl")
    assert sorted(text) == sorted(set(unpacked) - {"seed", "epochs"} | {"output_format"})
    assert "output_format" not in _config() and "per_subset" not in _config(per_subset=True)


def test_a_group_is_recorded_only_when_on_and_an_option_only_when_it_applies():
    assert sorted(_config(dedup="exact")) == sorted(DEFAULT_KEYS + DEDUP_KEYS)
    decontaminated = _config(decontaminate=("s3://user:secret@bucket/evals/*.jsonl",))
    assert decontaminated["decontaminate"] == ["s3://<credentials removed>"]  # recorded redacted
    assert sorted(decontaminated) == sorted(DEFAULT_KEYS + DEDUP_KEYS)
    best = _config(packing="best_fit", packing_window=7)
    assert (best["packing"], best["packing_window"], best["document_boundaries"]) == ("best_fit", 7, True)
    assert "packing" not in _config(packing_window=7)  # concat: the window does not apply
    assert _config(id_key="meta.id")["id_key"] == "meta.id" and "id_key" not in _config()


def test_recorded_values_are_the_manifests_form():
    out = _config(inputs=("https://host/a.jsonl?X-Amz-Signature=abc",), epochs=(("Github", 2.0),),
                  subsets=("Github", "ArXiv"))
    assert out["inputs"] == ["https://host/a.jsonl?X-Amz-Signature=<removed>"]
    assert out["epochs"] == {"Github": 2.0} and out["subsets"] == ["ArXiv", "Github"]  # in the Pile's order
    assert out["tokenizer_model"].startswith("/")  # a local path, absolute


def test_recorded_when_and_predicates_of_a_group_of_ones_own():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Toy(OptionGroup):
        title = "toy"
        on: bool = option(False, help="on")
        size: int = option(3, bounds=Bounds(1, 9), help="size")
        label: str | None = option(None, recorded=lambda c: c.label is not None, help="label")

        def recorded_when(self):
            return self.on

    assert recorded(Toy()) == {}
    assert recorded(Toy(on=True)) == {"on": True, "size": 3}
    assert recorded(Toy(on=True, label="x")) == {"on": True, "size": 3, "label": "x"}
    with pytest.raises(ValueError, match="^--size 10 is above 9$"):
        Toy(size=10)


def test_a_groups_check_runs_once_for_its_owner_parents_first():
    calls = []

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Parent(OptionGroup):
        a: int = option(1, help="a")

        def check(self):
            calls.append("parent")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Child(Parent):
        b: int = option(2, help="b")

        def check(self):
            calls.append("child")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Other(Parent):
        c: int = option(3, help="c")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Both(Child, Other):
        def __post_init__(self):
            check_groups(self)

    Both()
    assert calls == ["parent", "child"]
    assert groups_of(Both) == [Parent, Other, Child, Both]


def _sections(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {group.title: [a.option_strings[0] for a in group._group_actions] for group in parser._action_groups}


def test_help_lists_each_flag_under_its_groups_title():
    sections = _sections(run.build_parser())
    titles = [t for t in sections if t not in ("positional arguments", "options") and not t.startswith("stage ")]
    assert titles == [InputOptions.title, DocumentLayout.title, OutputOptions.title, TokenizerOptions.title,
                      SelectionOptions.title, PackingOptions.title, DedupOptions.title, ExecutionOptions.title]
    for group in (InputOptions, OutputOptions, TokenizerOptions, PackingOptions, DedupOptions, ExecutionOptions):
        own = [options.flag(f) for f, _ in options.options_of(group, cli=True)
               if options.declaring_class(group, f.name) is group]
        assert sections[group.title] == own
    assert sections["options"] == ["-h", "--config", "--filters", "--stage_module"]


def test_missing_required_flags_are_named_in_helps_order():
    with pytest.raises(UsageError, match="^missing required flags: --input, --output_dir$"):
        run.parse_args([])
