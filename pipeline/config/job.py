"""The job's configuration: `PipelineConfig`, made of option groups; every `pile-pipeline run` flag is one of theirs.

    group              module            its flags
    InputOptions       inputs.py         --input, the layout (--text_key, ...), --chunk_mb, --max_line_mb, ...
    OutputOptions      output.py         --output_dir, --output_format, --shard_size_mb, --split, ...
    TokenizerOptions   tokenizing.py     --tokenizer_model, BOS/EOS and their ids, --tokenizer_backend
    SelectionOptions   selection.py      --subsets, --exclude_subsets, --epochs, --seed
    PackingOptions     packing.py        --seq_len, --packing, --packing_window, --remainder, ...
    DedupOptions       dedup.py          --dedup, --minhash_*, --decontaminate, --decontam_*
    ExecutionOptions   execution.py      --fan_out, --tokenizer_threads, --progress_every
    StageChoice        stages.py         --filters and the stages' own options

Each group checks its own options (pipeline/core/option_groups.py) and declares which of them decide
the output's bytes, and when: those go into the manifest's `config` (`to_json`); the others say
where things are or how the work is spread, and are left out, so that the same job written
elsewhere, on other machines or with other workers gives byte-identical output. The rules between
groups are `PipelineConfig._check_across_groups`, the one place that knows two groups at once.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.dedup import DEDUP_MODES, DedupOptions
from pipeline.config.execution import FAN_OUT_CHOICES, ExecutionOptions
from pipeline.config.inputs import CORRUPT_FILE_POLICIES, SUBSET_NAME_CHOICES, InputOptions
from pipeline.config.output import OUTPUT_FORMATS, OutputOptions
from pipeline.config.packing import REMAINDER_POLICIES, PackingOptions
from pipeline.config.selection import SelectionOptions
from pipeline.config.stages import StageChoice
from pipeline.config.tokenizing import VERIFY_TOKENIZER_MODES, TokenizerOptions, recorded_location
from pipeline.core.documents import Schema
from pipeline.core.option_groups import check_groups
from pipeline.core.options import flag, recorded
from pipeline.core.subsets import ALL_NAMES
from pipeline.format import buckets, jsonl
from pipeline.format.megatron import subset_slug
from pipeline.format.records import BEST_FIT, PACKING_MODES
from pipeline.stages.policy import DocumentPolicy

# The names importers use, from the groups that define them.
__all__ = ["CORRUPT_FILE_POLICIES", "DEDUP_MODES", "FAN_OUT_CHOICES", "OUTPUT_FORMATS", "PACKING_MODES",
           "REMAINDER_POLICIES", "SUBSET_NAME_CHOICES", "VERIFY_TOKENIZER_MODES", "PipelineConfig",
           "per_subset_outputs", "recorded_location"]

TEXT = jsonl.OUTPUT_FORMAT  # cleaned text (pipeline/format/jsonl.py): the one output that needs no tokenizer
# Options that do nothing for a JSON-lines output, and why: refused rather than silently ignored.
_NOT_FOR_TEXT = (
    (("seq_len", "packing", "packing_window", "remainder", "document_boundaries"),
     "packing is for token records; each JSON line holds one whole document"),
    (("epochs",), "each kept document is written once; epochs are the reading tool's business"),
    (("per_subset",), "one output holds every subset, each line's in its metadata.subset (select with --subsets)"),
    (("provenance",), "each JSON line holds its source (metadata.source: input file and line)"),
)
_TOKENIZER_ONLY = ("tiktoken_encoding", "add_bos", "add_eos", "bos_id", "eos_id", "allow_text_eos", "pad_id",
                   "tokenizer_backend", "verify_tokenizer")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineConfig(InputOptions, OutputOptions, TokenizerOptions, SelectionOptions, PackingOptions, DedupOptions,
                     ExecutionOptions, StageChoice):
    """Everything that decides the output bytes (plus where things are and how the work spreads)."""

    def __post_init__(self):
        check_groups(self)
        self._check_across_groups()
        self.check_stages()
        if self.split_by and not self.stage_names():
            raise ValueError(f"--split_by {self.split_by}: no stage is on to label the documents (turn one on: "
                             "--filters fasttext_classifier, hf_classifier, or --languages)")
        self.schema  # noqa: B018 -- made here, in the driver: a worker unpickles it and never asks a stage

    def _check_across_groups(self) -> None:
        """The rules between groups: what one group's choice rules out in another."""
        if self.output_format == TEXT:
            self._check_text_output()
        elif self.tokenizer_model is None:
            raise ValueError(f"--tokenizer_model is required for --output_format {self.output_format} (only "
                             f"--output_format {TEXT} writes text without one)")
        if self.output_format == "megatron":
            if self.packing == BEST_FIT:
                raise ValueError("--packing best_fit is for packed TFRecords: the Megatron output keeps one "
                                 "document per sequence (Megatron's GPTDataset does its own packing)")
            if self.document_boundaries:
                raise ValueError("--document_boundaries is for packed TFRecords: the Megatron output keeps one "
                                 "document per sequence (Megatron's GPTDataset packs and can reset positions)")
        if self.per_subset and self.output_format == "tfrecord":
            per_subset_outputs(self)  # checks that the subsets are named and their directories distinct
        if self.resume and self.overwrite:
            raise ValueError("--resume with --overwrite: --overwrite starts again from nothing, --resume takes up "
                             "the run before; give one of them")
        if self.resume and self.per_subset and self.output_format == "tfrecord":
            raise ValueError("--resume does not take up a --per_subset TFRecord job (one output per subset): run it "
                             "again with --overwrite")
        if self.resume and self.split_by:
            raise ValueError("--resume does not take up a --split_by job (one output per bucket): run it again with "
                             "--overwrite")
        if self.split_by:
            if self.output_format != "tfrecord":
                raise ValueError(f"--split_by is for TFRecord outputs (one per bucket, read as a mixture), not "
                                 f"--output_format {self.output_format}: split a TFRecord job, or keep one "
                                 "output and filter with the stage's own thresholds")
            if self.per_subset:
                raise ValueError("--split_by with --per_subset: choose one (each bucket's output holds every "
                                 "selected subset; --subsets NAME splits one subset's documents)")

    def check_stages_ready(self) -> None:
        """Each stage's own check, in the driver; then --split_by's label against the stages' (`split_values`)."""
        super().check_stages_ready()
        if self.split_by:
            self.split_values()

    def split_values(self) -> tuple[str, ...] | None:
        """The buckets of --split_by when the stages declare its values (NONE among them), else None.

        ValueError naming --split_by: a label no stage on gives its documents, or two values whose
        bucket directories would be one (pipeline/format/buckets.py). Asked after the stages' checks.
        """
        declared: dict[str, list] = {}
        for stage in self.configured_stages():
            for key, values in stage.labels().items():
                declared.setdefault(key, []).append(values)
        if self.split_by not in declared:
            raise ValueError(f"--split_by {self.split_by}: no stage on labels documents so (the labels of the stages "
                             f"on: {', '.join(sorted(declared)) or 'none'})")
        if any(values is None for values in declared[self.split_by]):
            return None  # found as the documents come: their directories are checked before any shard is written
        values = buckets.ordered({str(v) for values in declared[self.split_by] for v in values} | {buckets.NONE})
        buckets.directories(self.split_by, values)
        return tuple(values)

    @property
    def schema(self) -> Schema:
        """The input layout, with the keys the stages on read from each line (`with_stage_keys`)."""
        return self.with_stage_keys(InputOptions.schema.fget(self))

    def _check_text_output(self) -> None:
        """A JSON-lines output: the options that would do nothing refused, one line naming them."""
        for names, why in _NOT_FOR_TEXT:
            given = _changed(self, names)
            if given:
                verb = "does" if len(given) == 1 else "do"
                raise ValueError(f"{' '.join(given)} {verb} not apply to --output_format {TEXT}: {why}")
        given = _changed(self, _TOKENIZER_ONLY) if self.tokenizer_model is None else []
        if given:
            raise ValueError(f"{' '.join(given)} without --tokenizer_model: the {TEXT} output is then not tokenized; "
                             "give --tokenizer_model to count tokens")

    def document_policy(self) -> DocumentPolicy:
        """Validation, subset selection and the configured stages, as every DoFn reading documents applies them."""
        return DocumentPolicy(self.schema, self.max_line_bytes, self.selection(), self.configured_stages())

    @property
    def lists_removed(self) -> bool:
        """Whether the job lists removed documents in removed/ (dedup, decontamination or a removing stage)."""
        return self.dedup_enabled or self.document_policy().lists_removed

    def to_json(self) -> dict:
        """The recorded options, JSON-ready, for the manifest (see the module docstring)."""
        out = recorded(self)
        out.update(self.stages_json())
        return out


def per_subset_outputs(config: PipelineConfig) -> tuple[tuple[str, str], ...]:
    """(subset, directory name) of each output of a `--per_subset` TFRecord job, in the selection's order."""
    if config.subsets == (ALL_NAMES,):
        raise ValueError("--per_subset with --subset_names any needs the subsets named: --subsets 'A,B,...' "
                         "(each gets its own output directory, so the job must know them before it reads)")
    pairs = tuple((name, subset_slug(name)) for name in config.subsets)
    slugs = [slug for _, slug in pairs]
    clashes = sorted({n for n, slug in pairs if slugs.count(slug) > 1})
    if clashes:
        raise ValueError(f"--per_subset: subsets {clashes} would share an output directory name; rename them")
    return pairs


def _changed(config: PipelineConfig, names: tuple[str, ...]) -> list[str]:
    """The flags of the options among `names` that are not at their defaults."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    return [flag(fields[name]) for name in names if getattr(config, name) != fields[name].default]
