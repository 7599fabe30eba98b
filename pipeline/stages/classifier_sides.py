"""train-classifier's two sides read from a job's output: the documents it kept against those it removed.

    pile-pipeline train-classifier --from_output OUT [--removed_reason fineweb_quality,...] --model m.bin

The manifest names the inputs (by file index), the subsets selected and the removed/ files. Each
input is read once, in order, with the job's own text and subset keys: a line that validates, of a
selected subset, with a non-empty text, is *removed* when removed/ lists it with one of the reasons
asked for (every reason when none is given; a `<stage>_cut` record keeps its document), *kept* when
removed/ does not list it at all, and left out otherwise (removed for another reason). The kept side
is the input text (a stage that cut a document, such as C4's, cut it after this text). An input whose
line count is not the manifest's is refused: it is not the file the output was made from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import fsspec

from pipeline.core.documents import BadRecord, Schema, parse_document
from pipeline.format import manifest as manifest_lib
from pipeline.io import columnar, inputs


def load(output_dir: str) -> dict:
    """The output's manifest (TFRecord or Megatron), its listed removed/ files checked to be its run's."""
    try:
        manifest = manifest_lib.load_manifest(output_dir)
    except manifest_lib.ManifestError:
        manifest = manifest_lib.load_manifest(output_dir, manifest_lib.FORMAT_MEGATRON)
    files = [str(f.get("path", "")) for f in manifest.get("removed", {}).get("files", [])]
    for rel in files:
        if not rel or rel.startswith("/") or ".." in rel.split("/") or "://" in rel or "\\" in rel:
            raise ValueError(f"--from_output {output_dir}: removed file {rel!r} escapes the output directory")
    manifest_lib.check_run(manifest, output_dir, files)
    return manifest


def removed_reasons(output_dir: str, manifest: dict, reasons: tuple[str, ...]) -> dict[tuple[int, int], bool]:
    """{(file index, line): whether its removal is one of `reasons`} for every removal (cuts left out)."""
    out = {}
    for entry in manifest.get("removed", {}).get("files", []):
        with fsspec.open(f"{output_dir.rstrip('/')}/{entry['path']}", "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record["reason"].endswith("_cut"):  # a cut keeps its document
                    continue
                out[(record["file_index"], record["line"])] = not reasons or record["reason"] in reasons
    return out


def sides(output_dir: str, reasons: tuple[str, ...], max_line_bytes: int) -> Iterator[tuple[bool, str]]:
    """(removed?, text) of every document of the output's inputs that is on one side (module docstring)."""
    manifest = load(output_dir)
    config = manifest["config"]
    schema = Schema(config.get("text_key", "text"), config.get("subset_key", "meta.pile_set_name"),
                    config.get("default_subset"), config.get("subset_names") == "any")
    removed = removed_reasons(output_dir, manifest, reasons)
    selected = {name for name, s in manifest["subsets"].items() if s.get("selected", True)}
    for file_index, entry in enumerate(manifest["inputs"]):
        path = entry["path"]
        lines = columnar.iter_lines(path, schema) if columnar.is_columnar(path) else inputs.iter_lines(
            path, max_line_bytes)
        count = 0
        for line in lines:
            count += 1
            try:
                doc = parse_document(line, max_line_bytes, schema)
            except BadRecord:
                continue
            if doc.subset not in selected or not doc.text.strip():
                continue
            verdict = removed.get((file_index, line.number))
            if verdict is None:
                yield False, doc.text
            elif verdict:
                yield True, doc.text
        if count != entry.get("lines", count):
            raise ValueError(f"--from_output: {path} has {count} lines, the output's manifest {entry['lines']}: "
                             "not the file the output was made from")
