"""Command line: `python -m pipeline.run --input 'train/*.jsonl.zst' --output_dir out --tokenizer_model m.model`.

Our flags are parsed here; every other flag goes to Beam's `PipelineOptions` unchanged, so every
runner option works (`--runner`, `--direct_num_workers`, `--project`, ...). `--config FILE` reads a
TOML file (see beam_configs/) whose [pipeline] and [beam] tables give defaults that the command
line overrides.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import time
import tomllib

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
)

from pipeline import manifest as manifest_lib
from pipeline.config import (
    FAN_OUT_CHOICES,
    TOKENIZER_BACKENDS,
    VERIFY_TOKENIZER_MODES,
    PipelineConfig,
    parse_epochs,
    parse_subsets,
)
from pipeline.execution import plan_execution
from pipeline.job import build_pipeline, resolve_job
from pipeline.read import expand_inputs, redact_url
from pipeline.spill import make_spill_dir, remove_spill_dir
from pipeline.summary import format_summary
from pipeline.tokenizer import load_processor, resolve_special_ids
from pipeline.writer import prepare_output_dir

LOG = logging.getLogger("pipeline")


def parse_bool(value: str) -> bool:
    """The argparse type of true/false flags (`--flag`, `--flag true`, `--flag 0`)."""
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {value!r}")


def build_parser() -> argparse.ArgumentParser:
    """Our flags (Beam's are left for PipelineOptions)."""
    p = argparse.ArgumentParser(prog="python -m pipeline.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="TOML file with [pipeline] and [beam] tables (beam_configs/)")
    p.add_argument("--input", action="append", default=None,
                   help="glob or fsspec URL of .jsonl.zst/.jsonl.gz/.jsonl files; repeatable")
    p.add_argument("--output_dir", help="local path, EFS mount or s3:// URL")
    p.add_argument("--tokenizer_model", help="SentencePiece .model (Llama-2 tokenizer.model works)")
    p.add_argument("--seq_len", type=int, default=2048, help="label positions per record (default 2048)")
    p.add_argument("--shard_size_mb", type=float, default=1024.0, help="max shard size (default 1024)")
    p.add_argument("--split", default="train", help="shard name prefix (default train)")
    p.add_argument("--subsets", default=None,
                   help="'all' (default), 'uncopyrighted', or a comma list of pile_set_name values")
    p.add_argument("--exclude_subsets", default=None, help="comma list of subsets to leave out")
    p.add_argument("--epochs", default=None,
                   help="per-subset epochs: 'pile_paper' (Gao et al. Table 1) or 'Name=2,Other=1.5'")
    p.add_argument("--seed", type=int, default=0, help="shuffle and fractional-epoch seed")
    p.add_argument("--add_bos", type=parse_bool, nargs="?", const=True, default=False)
    p.add_argument("--add_eos", type=parse_bool, nargs="?", const=True, default=True,
                   help="EOS after every document (default true, the model's id)")
    p.add_argument("--bos_id", type=int, default=None, help="override the model's BOS id")
    p.add_argument("--eos_id", type=int, default=None, help="override the model's EOS id")
    p.add_argument("--remainder", choices=("pad", "drop"), default="pad",
                   help="the job's last partial record: pad (marked by valid_labels) or drop")
    p.add_argument("--document_boundaries", type=parse_bool, nargs="?", const=True, default=False,
                   help="also write seqio-style segment_ids and positions")
    p.add_argument("--chunk_mb", type=float, default=4.0, help="unit of work after the fan-out")
    p.add_argument("--max_line_mb", type=float, default=64.0, help="longer lines are dead-lettered")
    p.add_argument("--on_corrupt_file", choices=("fail", "skip"), default="fail")
    p.add_argument("--tokenizer_backend", choices=TOKENIZER_BACKENDS, default="sentencepiece",
                   help="auto: a fast engine when it passes a self-check against SentencePiece, else SentencePiece")
    p.add_argument("--verify_tokenizer", choices=VERIFY_TOKENIZER_MODES, nargs="?", const="dead_letter", default="off",
                   help="also run SentencePiece on every document; a mismatch is dead-lettered or fails the job")
    p.add_argument("--overwrite", type=parse_bool, nargs="?", const=True, default=False,
                   help="replace a previous output in --output_dir")
    p.add_argument("--fan_out", choices=FAN_OUT_CHOICES, default="auto",
                   help="shuffle chunks to workers (yes), give each worker whole files (no), or auto: no "
                   "on DirectRunner with at least 2 files per worker, yes elsewhere; output is the same")
    p.add_argument("--tokenizer_threads", type=int, default=None,
                   help="threads per tokenizer batch (default: cores / workers on DirectRunner, else 1)")
    return p


def _beam_flags(table: dict) -> list[str]:
    flags = []
    for key, value in table.items():
        if isinstance(value, bool):
            flags += [f"--{key}"] if value else []
        elif isinstance(value, list):
            flags += [f"--{key}={v}" for v in value]
        else:
            flags.append(f"--{key}={value}")
    return flags


def parse_args(argv: list[str]) -> tuple[PipelineConfig, list[str]]:
    """Split argv into our config and Beam's flags, applying a --config file first."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    parser = build_parser()
    beam_defaults: list[str] = []
    config_inputs = None
    if known.config:
        with open(known.config, "rb") as f:
            table = tomllib.load(f)
        unknown = set(table) - {"pipeline", "beam"}
        if unknown:
            raise ValueError(f"{known.config}: unknown tables {sorted(unknown)}; use [pipeline] and [beam]")
        settings = dict(table.get("pipeline", {}))
        config_inputs = settings.pop("input", None)
        valid = {a.dest for a in parser._actions}
        bad = set(settings) - valid
        if bad:
            raise ValueError(f"{known.config}: unknown [pipeline] keys {sorted(bad)}")
        parser.set_defaults(**settings)
        beam_defaults = _beam_flags(table.get("beam", {}))
    args, beam_args = parser.parse_known_args(argv)
    inputs = args.input or ([config_inputs] if isinstance(config_inputs, str) else config_inputs) or []
    for name in ("output_dir", "tokenizer_model"):
        if not getattr(args, name):
            parser.error(f"--{name} is required")
    config = PipelineConfig(
        inputs=tuple(inputs),
        output_dir=args.output_dir,
        tokenizer_model=args.tokenizer_model,
        seq_len=args.seq_len,
        shard_size_mb=args.shard_size_mb,
        split=args.split,
        subsets=parse_subsets(args.subsets, args.exclude_subsets),
        epochs=parse_epochs(args.epochs),
        seed=args.seed,
        add_bos=args.add_bos,
        add_eos=args.add_eos,
        bos_id=args.bos_id,
        eos_id=args.eos_id,
        remainder=args.remainder,
        document_boundaries=args.document_boundaries,
        chunk_mb=args.chunk_mb,
        max_line_mb=args.max_line_mb,
        on_corrupt_file=args.on_corrupt_file,
        tokenizer_backend=args.tokenizer_backend,
        verify_tokenizer=args.verify_tokenizer,
        overwrite=args.overwrite,
        fan_out=args.fan_out,
        tokenizer_threads=args.tokenizer_threads,
    )
    return config, beam_defaults + beam_args


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options; DirectRunner defaults to multi-processing on all cores."""
    options = PipelineOptions(beam_args)
    test = options.view_as(TestOptions)
    if isinstance(test.dry_run, str):
        # Beam keeps `--dry_run VALUE` as a string, so `--dry_run False` would count as true.
        try:
            test.dry_run = parse_bool(test.dry_run)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"--dry_run: {e}") from None
    setup = options.view_as(SetupOptions)
    if setup.setup_file == "":
        # `--setup_file ''` unsets a config file's setup_file (e.g. when a worker image holds the package).
        setup.setup_file = None
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner", "direct"):
        standard.runner = "DirectRunner"
        direct = options.view_as(DirectOptions)
        if not any(a.startswith("--direct_running_mode") for a in beam_args):
            direct.direct_running_mode = "multi_processing"
        if not any(a.startswith("--direct_num_workers") for a in beam_args):
            direct.direct_num_workers = os.cpu_count() or 1
    return options


def refuse_credentials_in_urls(config: PipelineConfig) -> None:
    """Credentials come from the environment or the instance role, never from a URL.

    A `scheme://user:secret@...` URL would otherwise reach error messages, logs and the manifest's
    config; the error names the flag and shows the URL without its userinfo.
    """
    urls = [("--input", u) for u in config.inputs]
    urls += [("--output_dir", config.output_dir), ("--tokenizer_model", config.tokenizer_model)]
    for flag, url in urls:
        if redact_url(url) != url:
            raise ValueError(
                f"{flag} {redact_url(url)!r}: credentials in URLs are refused. Give them through the "
                "environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "GOOGLE_APPLICATION_CREDENTIALS) or the instance role."
            )


def main(argv: list[str] | None = None) -> dict | None:
    """Run the pipeline; returns the manifest it wrote (None when the job was only translated).

    With `--dry_run True` (DataflowRunner) or `--output_executable_path` (Flink/Spark jar) the job
    is translated but not run here: the output directory is left untouched (dry run) or checked
    and prepared (jar), and there is no manifest to return.
    """
    argv = sys.argv[1:] if argv is None else argv
    config, beam_args = parse_args(argv)
    refuse_credentials_in_urls(config)
    options = pipeline_options(beam_args)
    dry_run = bool(options.view_as(TestOptions).dry_run)
    executable = options.view_as(PortableOptions).output_executable_path
    # Fail fast, before any worker starts: inputs, tokenizer and output directory.
    input_files = expand_inputs(list(config.inputs))
    sp = load_processor(config.tokenizer_model)
    special = resolve_special_ids(
        sp, add_bos=config.add_bos, add_eos=config.add_eos, bos_id=config.bos_id, eos_id=config.eos_id
    )
    if not dry_run:
        prepare_output_dir(config.output_dir, config.overwrite)
    runner = options.view_as(StandardOptions).runner
    execution = plan_execution(runner, options.view_as(DirectOptions).direct_num_workers, input_files,
                               config.fan_out, config.tokenizer_threads)
    if execution.spill and not (dry_run or executable):
        execution = dataclasses.replace(execution, spill_dir=make_spill_dir(config.output_dir))
    job = resolve_job(config, input_files, special, execution)
    LOG.info("%d input files -> %s (runner %s)", len(input_files), redact_url(config.output_dir), runner)
    start = time.monotonic()
    try:
        with beam.Pipeline(options=options) as p:
            build_pipeline(p, job)
    finally:
        remove_spill_dir(execution.spill_dir)
    if dry_run or executable:
        LOG.info("%s: the job was translated for %s, not run%s", "dry run" if dry_run else "jar",
                 runner, f"; wrote {executable}" if executable else "")
        return None
    manifest = manifest_lib.load_manifest(config.output_dir)
    print(format_summary(manifest, time.monotonic() - start))
    return manifest


class _OwnWorkerLogs(logging.Filter):
    """Keep the log lines DirectRunner's workers forward only when our code wrote them (or errors)."""

    _FIELDS = re.compile(r'message: "(?P<msg>.*?)"(?: instruction_id| log_location| thread|\s*$)', re.S)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        location = text.rsplit("log_location", 1)[-1]
        ours = f"{os.sep}pipeline{os.sep}" in location and "site-packages" not in location
        if not ours and record.levelno < logging.ERROR:
            return False
        match = self._FIELDS.search(text)
        if match:
            record.msg, record.args = "worker: %s", (match.group("msg"),)
        return True


def configure_logging() -> None:
    """Our progress at INFO; Beam's own chatter only from WARNING up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    forwarded = logging.getLogger("apache_beam.runners.portability.local_job_service")
    forwarded.setLevel(logging.INFO)
    forwarded.addFilter(_OwnWorkerLogs())


if __name__ == "__main__":
    configure_logging()
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError, manifest_lib.ManifestError) as e:
        LOG.error("%s", e)
        sys.exit(2)
