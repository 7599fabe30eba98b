"""The manifest entries every output format shares.

The TFRecord job's manifest (pipeline/beam/tfrecord/output.py) and the Megatron job's (pipeline/beam/megatron.py)
add their own entries and totals to these.
"""

from __future__ import annotations

from pipeline.config.job import PipelineConfig
from pipeline.core import documents
from pipeline.core.stats import JobStats, merge_into
from pipeline.core.versions import created_by


def shared_entries(config: PipelineConfig, run_id: str, stats: JobStats, dead_letters: list[dict],
                   resumes: int = 0) -> dict:
    """Who wrote the output, the split, per-subset counts, dead letters, inputs; totals of documents and lines.

    `stats`: the job's summed stats; its subsets gain their epochs and whether they were selected.
    `resumes`: how many runs before this one worked on the output (--resume): with the chunks this run
    processed and those it took from them, the manifest's `resume` (all that differs from a clean run's
    but the run id).
    """
    subsets = stats.manifest_subsets()
    selection = config.selection()
    for name, s in subsets.items():
        s["epochs"] = config.epochs_of(name)
        s["selected"] = name in selection
    entries = {
        "created_by": created_by(),
        "run_id": run_id,
        "split": config.split,
        "totals": {
            "documents_kept": sum(s.kept for s in stats.subsets.values()),
            "lines": stats.lines,
        },
        "subsets": subsets,
        "dead_letters": {
            "by_reason": dict(stats.dead_letters),
            "records": sum(d["records"] for d in dead_letters),
            "files": sorted(dead_letters, key=lambda d: d["path"]),
        },
        # Validation's per-file counts are there for every file, read or empty.
        "inputs": stats.manifest_inputs(documents.file_stats()),
        "resume": {"count": resumes, "chunks_processed": stats.work.get("processed", 0),
                   "chunks_reused": stats.work.get("reused", 0)},
    }
    if config.lists_removed:  # only then, so that the default output keeps its manifest's bytes
        entries["removed"] = removed_entry(subsets, stats.removed_files, config.tokenizer_model is not None)
    return entries


def removed_entry(subsets: dict, files: dict, tokenized: bool = True) -> dict:
    """The manifest's `removed`: documents and tokens removed by reason (a stage's or dedup's), cuts, the files.

    A cut document is kept with a changed text and listed in removed/ (`contaminated_cut`, a stage's
    `<name>_cut`): `cut` counts them, `cut_by_reason` each reason (a document cut twice, twice).
    `tokens_by_reason` only where the job tokenized (`tokenized`).
    `rules` and `cut_rules` are the subsets' summed, each only when some subset has any.
    """
    totals: dict = {}
    for key in ("removed", "removed_tokens", "cut_by_reason", "rules", "cut_rules"):
        for s in subsets.values():
            merge_into(totals.setdefault(key, {}), s.get(key, {}))
    entry = {
        "by_reason": totals["removed"],
        "tokens_by_reason": totals["removed_tokens"],
        "cut": sum(s.get("cut", 0) for s in subsets.values()),
        "cut_by_reason": totals["cut_by_reason"],
        "records": sum(f["records"] for f in files.values()),
        "files": [files[k] for k in sorted(files)],
    }
    entry.update({key: totals[key] for key in ("rules", "cut_rules") if totals[key]})
    if not tokenized:
        del entry["tokens_by_reason"]
    return entry


def tokenizer_json(job) -> dict:
    """The manifest's `tokenizer`: the model file, its hash, special ids and policy, the backend.

    A tokenizer other than SentencePiece adds its kind, files, where each special id came from, the
    library versions (and a tiktoken file's encoding and pattern): its kind's `manifest_facts`
    (kinds/registry.py). The ids here are the job's (flags applied); a SentencePiece model's entry is
    as it always was.
    """
    spec = job.tokenizer
    special = spec.special
    out = {
        "model": job.config.tokenizer_model.rstrip("/").rsplit("/", 1)[-1],
        "sha256": spec.sha256,
        "vocab_size": special.vocab_size,
        "bos_id": special.bos_id,
        "eos_id": special.eos_id,
        "pad_id": special.pad_id,
        "unk_id": special.unk_id,
        "add_bos": special.add_bos,
        "add_eos": special.add_eos,
        "separator_id": special.separator_id,
        "padding_id": special.padding_id,
        "backend": spec.backend.to_json(),
    }
    if spec.facts:
        out.update({k: v for k, v in spec.facts.items() if k not in out and k != "path" and not k.endswith("_id")})
    return out
