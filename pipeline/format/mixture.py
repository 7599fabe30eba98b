"""`mixture.json`: several outputs of one tokenizer and seq_len read as one weighted mixture.

    {"format": "pile-mixture", "format_version": 1,
     "weights": "pile_paper",                        # optional preset instead of per-source weights
     "sources": [{"name": "Pile-CC", "manifest": "pile-cc/manifest.json", "weight": 0.6},
                 {"name": "ArXiv", "manifest": "s3://bucket/arxiv", "weight": 0.4}],
     "schedule": [{"step": 4096, "weights": {"Pile-CC": 0.5, "ArXiv": 0.5}}]}

A source is an output directory or its manifest (relative to the mixture file, or a URL); `name`
defaults to a `--split_by` bucket's directory (`hf.int_score=3`), else the output's only subset (an
output written per subset) or its directory name. The buckets of one `--split_by` run are outputs
of one tokenizer: any of them mix, with weights of their own (`keep >= 3`: leave the others out or
weigh them 0; `upsample 5`: its label tokens times 5). Weights:
a number per source, or a preset for all: `tokens` (each source's label tokens: every record
alike) or `pile_paper` (each subset's tokens x the Pile paper's epochs, Gao et al. 2020 Table 1;
other names count once). `schedule` re-weights from a global step on: each entry names every
source (0 takes nothing from it from that step on), or gives a preset. The same as a Python list::

    Mixture.of([("Pile-CC", "out/pile-cc", 0.6), ("ArXiv", "out/arxiv", 0.4)])

Every source must come from the same tokenizer (its sha256, vocab size and special ids), seq_len and
token dtype; anything wrong is one `MixtureError` naming the file(s). The sources are all TFRecord
outputs, or all document stores (`--output_format megatron` outputs, packed when read;
pipeline/reader/engine/doc_mixture.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath

import fsspec

from pipeline.core.subsets import PILE_PAPER_EPOCHS
from pipeline.format.manifest import FORMAT_MEGATRON, ManifestError, load_manifest, manifest_path

FORMAT = "pile-mixture"
FORMAT_VERSION = 1
PRESETS = ("tokens", "pile_paper")
MAX_MIXTURE_BYTES = 64 << 20  # a mixture lists outputs: anything near this is not one


class MixtureError(ValueError):
    """A mixture description that cannot be read as given."""


@dataclasses.dataclass(frozen=True)
class MixtureSource:
    """One output of a mixture: its name, its manifest file and its weight from step 0."""

    name: str
    manifest: str
    weight: float


@dataclasses.dataclass(frozen=True)
class Mixture:
    """Sources and a schedule of weights: from schedule[i][0] on, weights schedule[i][1] (one per source).

    schedule[0] is always step 0 with the sources' weights. Build with `load_mixture` or `Mixture.of`.
    """

    sources: tuple[MixtureSource, ...]
    schedule: tuple[tuple[int, tuple[float, ...]], ...]
    description: str = "<list>"  # where it was read from, for messages

    @property
    def names(self) -> tuple[str, ...]:
        """The sources' names, in order."""
        return tuple(s.name for s in self.sources)

    @classmethod
    def of(cls, sources, schedule=None, weights: str | None = None) -> Mixture:
        """A mixture from a list of (name, manifest, weight) tuples or source dicts, as in mixture.json."""
        entries = []
        for s in sources:
            if isinstance(s, dict):
                entries.append(s)
            else:
                name, manifest, *rest = s
                entries.append({"name": name, "manifest": manifest, **({"weight": rest[0]} if rest else {})})
        spec = {"format": FORMAT, "format_version": FORMAT_VERSION, "sources": entries,
                **({"schedule": schedule} if schedule else {}), **({"weights": weights} if weights else {})}
        return _parse(spec, base=None, where="<list>")


def _manifest_file(location: str, base: str | None) -> str:
    location = os.fspath(location)
    if base is not None and "://" not in location and not posixpath.isabs(location):
        location = posixpath.join(base, location)
    return location if location.endswith(".json") else manifest_path(location)


def _default_name(manifest: dict, file: str) -> str:
    folder = posixpath.basename(posixpath.dirname(file)) or file
    if isinstance(manifest.get("bucket"), dict):  # a --split_by bucket: its directory, `<label>=<value>`
        return folder
    subsets = [k for k, v in (manifest.get("subsets") or {}).items() if (v or {}).get("tokens")]
    if len(subsets) == 1:
        return subsets[0]
    return folder


def preset_weight(preset: str, manifest: dict, file: str) -> float:
    """A source's weight under a preset: its label tokens, or its subsets' tokens x the paper's epochs."""
    if preset == "tokens":
        if manifest.get("format") == FORMAT_MEGATRON:  # a store: its documents' tokens
            return float(manifest["totals"]["tokens"])
        return float(manifest["totals"]["label_tokens"])
    if preset == "pile_paper":
        subsets = manifest.get("subsets") or {}
        counted = {k: v.get("tokens") for k, v in subsets.items() if isinstance(v, dict) and v.get("tokens")}
        if not counted:
            raise MixtureError(f"{file}: no per-subset token counts in the manifest, which `pile_paper` weighs")
        return float(sum(int(t) * PILE_PAPER_EPOCHS.get(k, 1.0) for k, t in counted.items()))
    raise MixtureError(f"weights preset {preset!r}: choose from {', '.join(PRESETS)}, or give each source a weight")


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 or value == float("inf"):
        raise MixtureError(f"{what}: weight {value!r} must be a finite number >= 0")
    return value


def _load_source(file: str) -> dict:
    """A source's manifest: a TFRecord output's, or a document store's (a Megatron output)."""
    try:
        return load_manifest(file)
    except ManifestError as e:
        if repr(FORMAT_MEGATRON) not in str(e):
            raise
    return load_manifest(file, FORMAT_MEGATRON, 1)


def _tokenizer_field(key: str):
    return lambda m: (m.get("tokenizer") or {}).get(key)


# What every source must share, as the job's manifests record it (pipeline/beam/manifest.py `tokenizer_json`,
# pipeline/format/records.py `feature_spec`): ids of one tokenizer, read as records of one shape.
ALIKE = (
    ("kind (TFRecord output or document store)", lambda m: m.get("format")),
    ("tokenizer sha256", _tokenizer_field("sha256")),
    ("tokenizer vocab_size", _tokenizer_field("vocab_size")),
    *((f"tokenizer {key}", _tokenizer_field(key)) for key in ("bos_id", "eos_id", "pad_id", "unk_id")),
    ("seq_len", lambda m: m.get("seq_len")),
    ("token dtype", lambda m: ((m.get("features") or {}).get("tokens") or {}).get("dtype")
     or (m.get("megatron") or {}).get("dtype")),
)


def _check_alike(loaded: list[tuple[dict, str, dict]], where: str) -> None:
    """Refuse sources of different tokenizers, special ids, seq_len or token dtype (or one that does not say)."""
    _, first_file, first = loaded[0]
    for _, file, m in loaded:
        sha = _tokenizer_field("sha256")(m)
        if not isinstance(sha, str) or not sha:
            raise MixtureError(f"{where}: {file} records no tokenizer sha256 (`tokenizer.sha256`): a mixture reads "
                               "outputs of one tokenizer, and this one's cannot be told")
    for _, file, m in loaded[1:]:
        for what, get in ALIKE:
            if get(m) != get(first):
                raise MixtureError(f"{where}: {first_file} and {file} differ in {what} ({get(first)!r} vs "
                                   f"{get(m)!r}): a mixture reads outputs of one tokenizer, seq_len and token dtype")


def _parse(spec: dict, base: str | None, where: str) -> Mixture:
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise MixtureError(f"{where}: not a mixture description (format {FORMAT!r} expected)")
    if spec.get("format_version") != FORMAT_VERSION:
        raise MixtureError(f"{where}: format_version {spec.get('format_version')!r}; this reader understands "
                           f"{FORMAT_VERSION}")
    unknown = sorted(set(spec) - {"format", "format_version", "sources", "weights", "schedule"})
    if unknown:
        raise MixtureError(f"{where}: unknown keys {unknown}")
    entries = spec.get("sources")
    if not isinstance(entries, list) or len(entries) < 1:
        raise MixtureError(f"{where}: `sources` must be a non-empty list")
    preset = spec.get("weights")
    loaded = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "manifest" not in e:
            raise MixtureError(f"{where}: source {i} must be an object with a `manifest`")
        extra = sorted(set(e) - {"name", "manifest", "weight"})
        if extra:
            raise MixtureError(f"{where}: source {i}: unknown keys {extra}")
        if not isinstance(e["manifest"], str | os.PathLike) or not os.fspath(e["manifest"]).strip():
            raise MixtureError(f"{where}: source {i}: `manifest` must be an output directory or its manifest.json "
                               f"(a non-empty string), not {e['manifest']!r}")
        if "name" in e and (not isinstance(e["name"], str) or not e["name"].strip()):
            raise MixtureError(f"{where}: source {i}: the name must be a non-empty string, not {e['name']!r} "
                               "(leave `name` out for the output's own)")
        file = _manifest_file(e["manifest"], base)
        try:
            manifest = _load_source(file)
        except ManifestError as err:
            raise MixtureError(f"{where}: source {i}: {err}") from err
        loaded.append((e, file, manifest))
    _check_alike(loaded, where)
    sources = []
    for e, file, m in loaded:
        name = e["name"] if "name" in e else _default_name(m, file)
        if preset is not None and "weight" in e:
            raise MixtureError(f"{where}: {name}: give a weight per source or the preset {preset!r}, not both")
        if preset is not None:
            weight = preset_weight(preset, m, file)
        elif "weight" in e:
            weight = _number(e["weight"], f"{where}: {name}")
        else:
            raise MixtureError(f"{where}: {name} has no weight; give one, or a `weights` preset ({', '.join(PRESETS)})")
        sources.append(MixtureSource(name, file, float(weight)))
    names = [s.name for s in sources]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MixtureError(f"{where}: source names {duplicates} appear more than once; name each source")
    if not any(s.weight > 0 for s in sources):
        raise MixtureError(f"{where}: every weight is 0")
    manifests = {s.name: m for s, (_, _, m) in zip(sources, loaded, strict=True)}
    schedule = [(0, tuple(s.weight for s in sources))]
    if not isinstance(spec.get("schedule", []), list):
        raise MixtureError(f"{where}: `schedule` must be a list of {{\"step\": K, \"weights\": ...}}")
    for i, entry in enumerate(spec.get("schedule") or []):
        schedule.append(_schedule_entry(entry, i, sources, manifests, where))
    steps = [s for s, _ in schedule]
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise MixtureError(f"{where}: schedule steps {steps[1:]} must be > 0 and increasing")
    return Mixture(tuple(sources), tuple(schedule), where)


def _schedule_entry(entry, i, sources, manifests, where) -> tuple[int, tuple[float, ...]]:
    if not isinstance(entry, dict) or set(entry) != {"step", "weights"}:
        raise MixtureError(f"{where}: schedule entry {i} must be {{\"step\": K, \"weights\": ...}}")
    step = entry["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise MixtureError(f"{where}: schedule entry {i}: step {step!r} must be an integer >= 1")
    weights = entry["weights"]
    if isinstance(weights, str):
        return step, tuple(preset_weight(weights, manifests[s.name], s.manifest) for s in sources)
    if not isinstance(weights, dict):
        raise MixtureError(f"{where}: schedule step {step}: weights must map every source name to a number")
    names = [s.name for s in sources]
    unknown, missing = sorted(set(weights) - set(names)), [n for n in names if n not in weights]
    if unknown:
        raise MixtureError(f"{where}: schedule step {step} names {unknown}, which the mixture has no source of "
                           "(a source added mid-run is listed in `sources`, with weight 0 until its step)")
    if missing:
        raise MixtureError(f"{where}: schedule step {step} leaves out {missing}: give every source a weight "
                           "(0 removes a source from that step on)")
    values = tuple(float(_number(weights[n], f"{where}: schedule step {step}: {n}")) for n in names)
    if not any(values):
        raise MixtureError(f"{where}: schedule step {step}: every weight is 0")
    return step, values


def load_mixture(spec) -> Mixture:
    """A mixture from a Mixture, a mixture.json path or URL, a dict as in mixture.json, or a list of sources."""
    if isinstance(spec, Mixture):
        return spec
    if isinstance(spec, list | tuple):
        return Mixture.of(spec)
    if isinstance(spec, dict):
        return _parse(spec, base=None, where="<dict>")
    path = os.fspath(spec)
    try:
        with fsspec.open(path, "rb") as f:
            data = json.loads(f.read(MAX_MIXTURE_BYTES + 1).decode("utf-8"))
    except FileNotFoundError as e:
        raise MixtureError(f"{path}: no such mixture file") from e
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise MixtureError(f"{path} is not valid JSON: {str(e)[:200]}") from None
    return _parse(data, base=posixpath.dirname(path), where=path)


def is_mixture(spec) -> bool:
    """Whether `make_dataset` should read `spec` as a mixture (not one output)."""
    if isinstance(spec, Mixture | list | tuple | dict):
        return True
    path = os.fspath(spec)
    return path.endswith(".json") and posixpath.basename(path) != "manifest.json"


def format_mixture(mixture: Mixture, manifests: dict[str, dict], where: str | None = None) -> str:
    """A table of a mixture: each source's weight, share, records, label tokens and manifest; the schedule."""
    total = sum(s.weight for s in mixture.sources) or 1.0
    lines = [f"mixture {where or mixture.description}: {len(mixture.sources)} sources",
             f"  {'source':<22} {'weight':>14} {'share':>7} {'records':>10} {'label tokens':>14}  manifest"]
    for s in mixture.sources:
        totals = (manifests.get(s.name) or {}).get("totals") or {}
        lines.append(f"  {s.name:<22} {s.weight:>14.6g} {s.weight / total:>7.2%} {totals.get('records', '?'):>10} "
                     f"{totals.get('label_tokens', '?'):>14}  {s.manifest}")
    for step, weights in mixture.schedule[1:]:
        shown = ", ".join(f"{n}={w:g}" for n, w in zip(mixture.names, weights, strict=True))
        lines.append(f"  from global step {step}: {shown}")
    return "\n".join(lines)
