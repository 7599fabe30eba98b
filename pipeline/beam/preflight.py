"""The driver's preflight, before any worker starts: `prepare(config, options) -> Job`.

Fail fast on what would stop the job later (credentials in paths, paths the workers cannot read,
inputs matching nothing, the tokenizer model), read the tokenizer model once, plan the execution
once and choose the tokenizer backend (its self-check reads the same model bytes). Nothing is
written and nothing is held: `run_job` (pipeline/beam/launch.py) then takes the output directory's
lock and runs the Job. A JSON-lines job without --tokenizer_model carries NO_TOKENIZER instead.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, TestOptions

from pipeline.beam.execution import Execution, file_sizes
from pipeline.beam.remote import check_workers_can_read
from pipeline.beam.runners.registry import profile_for
from pipeline.config.job import PipelineConfig
from pipeline.core.options import UsageError
from pipeline.format.records import BEST_FIT, token_dtype_for
from pipeline.io import columnar
from pipeline.io.eval_sets import EvalSetError, check_eval_set
from pipeline.io.files import NotAFileError
from pipeline.io.inputs import InputError, expand_inputs
from pipeline.io.layout_check import check_layout
from pipeline.io.outputs import new_run_id
from pipeline.io.snapshot import take_snapshots
from pipeline.io.urls import redact_url, refuse_credentials
from pipeline.process.documents import NO_TOKENIZER
from pipeline.startup.early_check import EarlyChoice
from pipeline.tokenize.kinds.base import SpecialIds, TokenizerFileError
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.model import TokenizerModel, TokenizerSpec
from pipeline.tokenize.self_check import choose_backend

LOG = logging.getLogger("pipeline")


@dataclasses.dataclass(frozen=True)
class Job:
    """What the driver resolved before building: the config, the expanded inputs, the tokenizer, the plan.

    run_id names the directory this run writes its files into (pipeline/io/outputs.py). A Job is
    small and pickles to the workers as it is (the tokenizer's bytes stay in the driver: each worker
    loads it from `tokenizer`, a `TokenizerSpec` of any kind).
    """

    config: PipelineConfig
    input_files: tuple[str, ...]
    tokenizer: TokenizerSpec  # where workers load it, its sha256, the chosen backend, the special ids (or NO_TOKENIZER)
    execution: Execution = Execution()
    run_id: str = ""
    # (path, snapshot) of every input at launch, checked as each is read (pipeline/io/snapshot.py).
    snapshots: tuple[tuple[str, tuple], ...] = ()
    eval_files: tuple[str, ...] = ()  # --decontaminate, expanded
    resumes: int = 0  # how many runs before this one worked on its output (--resume, pipeline/beam/resume.py)


def translated(options: PipelineOptions) -> tuple[bool, str | None]:
    """(dry run, jar): DataflowRunner's `--dry_run True`, the `--output_executable_path` of a Flink/Spark jar.

    Either way the job is translated here and not run.
    """
    return bool(options.view_as(TestOptions).dry_run), options.view_as(PortableOptions).output_executable_path


def check_columns(input_files: list[str], config) -> None:
    """Refuse (UsageError) a Parquet or Arrow input without the columns --text_key/--subset_key name."""
    for path in input_files:
        if columnar.is_columnar(path):
            try:
                columnar.check_columns(path, config.schema)
            except columnar.ColumnError as e:
                raise UsageError(str(e)) from None


def load_model(config: PipelineConfig) -> TokenizerModel | None:
    """The job's tokenizer model, read once, of whichever kind (None: a JSON-lines job without one).

    A file that cannot be used is a UsageError.
    """
    if config.tokenizer_model is None:
        return None
    if not config.tokenizer_model:  # never the current directory
        raise UsageError("--tokenizer_model '': the path is empty")
    try:
        return TokenizerModel.load(config.tokenizer_model, tiktoken_name=config.tiktoken_encoding)
    except FileNotFoundError:
        raise UsageError(f"--tokenizer_model: no such file {redact_url(config.tokenizer_model)}") from None
    except NotAFileError as e:  # a folder, a device, a FIFO, or a file past the size bound
        raise UsageError(f"--tokenizer_model {redact_url(config.tokenizer_model)!r}: {e}") from None
    except TokenizerFileError as e:
        shown = redact_url(config.tokenizer_model)
        reason = str(e).removeprefix(f"{shown}: ")
        raise UsageError(f"--tokenizer_model {shown!r}: {reason}") from None


def requested_backend(config: PipelineConfig, kind: str) -> str:
    """--tokenizer_backend for a tokenizer of `kind`: its reference when not given; one not valid for it is refused."""
    names = KINDS[kind].backends
    requested = config.tokenizer_backend or KINDS[kind].reference
    if requested not in names:
        raise UsageError(f"--tokenizer_backend {requested} does not apply to a {kind} tokenizer "
                         f"({redact_url(config.tokenizer_model)}): choose one of {', '.join(names)}")
    return requested


def resolved(config: PipelineConfig, model: TokenizerModel) -> PipelineConfig:
    """The config with --tokenizer_backend resolved for the model's kind (what the manifest records)."""
    return dataclasses.replace(config, tokenizer_backend=requested_backend(config, model.kind))


def prepare(config: PipelineConfig, options: PipelineOptions, model: TokenizerModel | None = None,
            early: EarlyChoice | None = None) -> Job:
    """Check everything that can be checked before the job starts and resolve the Job.

    `model`: the tokenizer model when the command read it already (`load_model`); `early`: the
    backend self-check, if the command started it (its result is used only where it matches what
    is decided here; the command stops it).
    """
    paths = [("--input", u) for u in config.inputs] + [("--output_dir", config.output_dir)] + (
        [("--tokenizer_model", config.tokenizer_model)] if config.tokenizer_model is not None else [])
    refuse_credentials(paths)
    try:
        check_workers_can_read(options, paths)
    except UsageError as e:
        if not translated(options)[0]:
            raise
        LOG.warning("%s (a dry run only translates the job here; a real run stops on this)", e)
    input_files = expand_inputs(list(config.inputs))
    # A wrong --text_key or layout is refused here, from each input's columns and first lines or
    # rows, not after the job.
    check_columns(input_files, config)
    check_layout(config.schema, input_files, config.max_line_bytes)
    config.check_stages_ready()
    eval_files = expand_eval_files(config)
    if model is None or model.path != config.tokenizer_model or model.tiktoken_name != config.tiktoken_encoding:
        model = load_model(config)
    execution = profile_for(options).plan(options, input_files, config.fan_out, config.tokenizer_threads,
                                          sum(file_sizes(input_files)))
    return tokenizer_job(config, model, input_files, execution, early,
                         snapshots=take_snapshots(input_files), eval_files=tuple(eval_files))


def check_segment_width(config: PipelineConfig, special: SpecialIds) -> None:
    """Refuse segment ids and positions that the records' token dtype cannot hold (UsageError).

    A record's segment ids and positions are stored in its tokens' dtype: uint16 for a vocabulary
    of at most 65,536 ids, which holds positions below 65,536 only.
    """
    segments = config.packing == BEST_FIT or config.document_boundaries
    if segments and token_dtype_for(special.vocab_size) == np.dtype("<u2") and config.seq_len > 1 << 16:
        flag = "--packing best_fit" if config.packing == BEST_FIT else "--document_boundaries"
        raise UsageError(f"--seq_len {config.seq_len} with {flag}: a record's segment ids and positions are "
                         f"stored as uint16 with a vocabulary of {special.vocab_size:,} ids, which holds "
                         "at most --seq_len 65536")


def tokenizer_job(config: PipelineConfig, model: TokenizerModel | None, input_files: list[str],
                  execution: Execution, early: EarlyChoice | None = None, **job_fields) -> Job:
    """The Job once the tokenizer is settled: the backend for its kind (self-checked), its special ids.

    `input_files`: what the self-check samples (none: its adversarial strings alone); `job_fields`:
    the rest of the Job (snapshots, eval_files). No model (a JSON-lines job): NO_TOKENIZER.
    """
    if model is None:
        return Job(config, tuple(input_files), NO_TOKENIZER, execution, new_run_id(), **job_fields)
    config = resolved(config, model)
    try:
        special = model.special_ids(add_bos=config.add_bos, add_eos=config.add_eos, bos_id=config.bos_id,
                                    eos_id=config.eos_id, pad_id=config.pad_id, allow_text=config.allow_text_eos)
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_segment_width(config, special)
    backend = early.result(config.tokenizer_backend, model, input_files,
                           config.schema) if early is not None else None
    backend = backend or choose_backend(config.tokenizer_backend, model.tokenizer, input_files, schema=config.schema)
    return Job(config, tuple(input_files), model.spec(backend, special), execution, new_run_id(), **job_fields)


def expand_eval_files(config: PipelineConfig) -> list[str]:
    """--decontaminate's globs, expanded and each file read through: a UsageError naming the flag and file.

    They match nothing, or a file has a malformed line or no n-gram (`check_eval_set`).
    """
    if not config.decontaminate:
        return []
    refuse_credentials([("--decontaminate", u) for u in config.decontaminate])
    try:
        files = expand_inputs(list(config.decontaminate), check_types=False)
        for path in files:
            check_eval_set(path, config.decontam_text_key, config.decontam_ngram)
    except (InputError, EvalSetError) as e:
        raise UsageError(f"--decontaminate: {e}") from None
    return files
