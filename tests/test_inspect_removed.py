"""`pile-pipeline removed`: a run's removed and cut documents, read back from its inputs, as the job wrote them.

The job runs the stages, exact dedup and decontamination (cutting) on four inputs of four kinds
(zstd, gzip, plain JSON lines, Parquet: tests/inspect_corpus.py). The command prints every record
of removed/ with the input's text, a cut with the text the job kept (checked against the stages
applied in process, and the eval spans cut), filters and samples reproducibly, and refuses an input
that changed since the run, naming it; a Megatron output's too.
"""

from __future__ import annotations

import json
import shutil

import inspect_corpus
import pytest
from corpus_helpers import FAST_BEAM
from report_page import check_numbers, render

from pipeline.cli import removed as removed_cli
from pipeline.cli import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cleaned(tiny_model, tmp_path_factory):
    """(corpus root, output, manifest, documents, expected) of the job on the inspection corpus."""
    root = tmp_path_factory.mktemp("inspect_corpus")
    docs = inspect_corpus.write(root)
    out = tmp_path_factory.mktemp("inspect_out") / "out"
    inputs = [str(root / name) for name in inspect_corpus.FILES]
    manifest = run.main(["--input", *inputs, "--output_dir", str(out), "--tokenizer_model", tiny_model,
                         "--seq_len", "64", "--chunk_mb", "0.004", *inspect_corpus.flags(root), *FAST_BEAM])
    return root, out, manifest, docs, inspect_corpus.expected(docs)


def _records(out, manifest) -> list[dict]:
    return [json.loads(line) for entry in manifest["removed"]["files"]
            for line in (out / entry["path"]).read_text().splitlines()]


def _run(capsys, *argv) -> tuple[int, str, str]:
    status = removed_cli.cli([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _json(capsys, *argv) -> list[dict]:
    status, out, err = _run(capsys, *argv, "--format", "json")
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _cut(text: str, spans) -> str:
    return "".join(text[a:b] for a, b in zip([0] + [e for _, e in spans], [s for s, _ in spans] + [len(text)],
                                             strict=True))


def test_every_record_with_its_document_and_a_cut_with_what_was_kept(cleaned, capsys):
    _, out, manifest, docs, expected = cleaned
    records = _records(out, manifest)
    reasons = {r["reason"] for r in records}
    assert {"gopher_quality", "c4_quality", "c4_quality_cut", "fineweb_quality", "language", "duplicate_exact",
            "contaminated_cut"} <= reasons
    shown = _json(capsys, out)
    assert [{k: v for k, v in s.items() if not k.startswith("text")} for s in shown] == records
    for item in shown:
        key = (item["file_index"], item["line"])
        text, subset = docs[key]
        assert item["text"] == text and item["text_chars"] == len(text) and item["subset"] == subset
        verdict, kept = expected[key]
        if item["reason"] in manifest["removed"]["by_reason"] and item["reason"] != "duplicate_exact":
            assert (item["reason"], item["rule"]) == verdict, key
        if item["reason"] == "c4_quality_cut":
            assert verdict is None and item["text_after"] == kept and "Privacy Policy" not in kept
        if item["reason"] == "contaminated_cut":
            assert item["text_after"] == _cut(kept, item["spans"])
            assert inspect_corpus.EVAL_TEXT in item["text"] and inspect_corpus.EVAL_TEXT not in item["text_after"]
        if item["reason"] == "duplicate_exact":  # dedup saw the text the stages left (PII redacted)
            assert item["text_decided"] == kept and "@example.net" not in item["text_decided"]
    assert len(shown) == manifest["removed"]["records"]


def test_filters_select_exactly_their_records(cleaned, capsys):
    _, out, manifest, _, _ = cleaned
    records = _records(out, manifest)
    for flags, keep in [(["--reason", "language"], lambda r: r["reason"] == "language"),
                        (["--rule", "gopher_short_doc", "--subset", "Github"],
                         lambda r: r.get("rule") == "gopher_short_doc" and r["subset"] == "Github"),
                        (["--reason", "c4_quality,c4_quality_cut"], lambda r: r["reason"].startswith("c4_quality"))]:
        got = [{k: v for k, v in s.items() if not k.startswith("text")} for s in _json(capsys, out, *flags)]
        assert got == [r for r in records if keep(r)] and got, flags
    language = _json(capsys, out, "--reason", "language")
    assert all(r["language"] == "de" and 0 < r["language_score"] <= 1 for r in language)


def test_the_text_form_shows_the_deciding_fields_and_a_cut_before_and_after(cleaned, capsys):
    _, out, _, _, _ = cleaned
    status, text, _ = _run(capsys, out, "--reason", "language", "--sample", "1")
    assert status == 0
    assert text.startswith("== removed: language / language_not_listed   language=de  language_score=0.")
    status, text, _ = _run(capsys, out, "--reason", "c4_quality_cut", "--sample", "1", "--chars", "60")
    assert status == 0 and "-- before: " in text and "-- after: " in text
    assert "- See our Privacy Policy\n- click here" in text and "more characters]" in text


def test_a_sample_is_reproducible_and_a_larger_one_holds_it(cleaned, capsys):
    _, out, manifest, _, _ = cleaned
    first = _json(capsys, out, "--sample", "4", "--seed", "3")
    assert len(first) == 4 and first == _json(capsys, out, "--sample", "4", "--seed", "3")
    larger = _json(capsys, out, "--sample", "9", "--seed", "3")
    assert all(item in larger for item in first)
    assert _json(capsys, out, "--sample", "4", "--seed", "4") != first
    each = _json(capsys, out, "--sample", "2", "--per_rule")
    rules = {(r["reason"], r.get("rule")) for r in _records(out, manifest)}
    assert {(r["reason"], r.get("rule")) for r in each} == rules
    assert all(sum(1 for r in each if (r["reason"], r.get("rule")) == rule) <= 2 for rule in rules)


def test_mistakes_and_empty_selections_are_one_line(cleaned, capsys, tmp_path):
    _, out, _, _, _ = cleaned
    status, _, err = _run(capsys, out, "--reason", "languag")
    assert status == 2 and "--reason 'languag'" in err and "did you mean language?" in err
    status, _, err = _run(capsys, out, "--rule", "gopher_shrt_doc")
    assert status == 2 and "did you mean gopher_short_doc?" in err
    status, text, err = _run(capsys, out, "--reason", "duplicate_exact", "--subset", "Pile-CC")
    assert status == 1 and text == "" and "no removed document" in err and "--subset Pile-CC" in err
    status, _, err = _run(capsys, out, "--per_rule")
    assert status == 2 and "--per_rule takes a --sample" in err
    status, _, err = _run(capsys, tmp_path)
    assert status == 2 and "No manifest" in err and len(err.strip().splitlines()) == 1


def test_an_input_changed_since_the_run_is_refused_naming_it(cleaned, capsys):
    root, out, _, docs, _ = cleaned
    plain = root / "c.jsonl"
    original = plain.read_bytes()
    try:
        plain.write_bytes(original + b'{"text": "one more line", "meta": {"pile_set_name": "Github"}}\n')
        status, text, err = _run(capsys, out, "--reason", "c4_quality_cut")
        # each input is checked as it is read: what comes before it is shown, nothing of it
        assert status == 2 and f"{plain} changed since the run" in err and f"{plain}:" not in text
        # The same number of lines and bytes, the bracket that removed a document made a parenthesis: the
        # input's content digest tells; in a manifest without digests, deciding the document again does.
        line = next(n for (f, n), (t, _) in docs.items() if f == 2 and "{1, 2}" in t)
        edited = original.replace(b"{1, 2}", b"(1, 2)", 1)
        assert len(edited) == len(original)
        plain.write_bytes(edited)
        status, text, err = _run(capsys, out, "--reason", "c4_quality")
        assert status == 2 and f"{plain} changed since the run" in err and "content digest differs" in err
        assert f"{plain}:" not in text
        manifest_file = out / "manifest.json"
        written = manifest_file.read_bytes()
        without = json.loads(written)
        for entry in without["inputs"]:
            entry.pop("content_digest")
        manifest_file.write_text(json.dumps(without))
        try:
            status, text, err = _run(capsys, out, "--reason", "c4_quality")
        finally:
            manifest_file.write_bytes(written)
        assert status == 2 and f"{plain} line {line}: the run recorded c4_quality/curly_bracket" in err
        assert "The input changed since the run, or the stages did" in err and f"{plain}:" not in text
        plain.unlink()
        status, _, err = _run(capsys, out, "--reason", "c4_quality_cut")
        assert status == 2 and f"{plain}: the run's input is not there any more" in err
    finally:
        plain.write_bytes(original)
    assert _run(capsys, out, "--reason", "c4_quality_cut")[0] == 0


def test_an_output_without_removals_is_refused_and_reported(cleaned, capsys, tmp_path, tiny_model):
    root, _, _, _, _ = cleaned
    plain = tmp_path / "plain"
    manifest = run.main(["--input", str(root / "c.jsonl"), "--output_dir", str(plain), "--tokenizer_model",
                         tiny_model, "--seq_len", "64", *FAST_BEAM])
    status, _, err = _run(capsys, plain)
    assert status == 2 and "lists no removed documents" in err
    page, text = render([plain], capsys, tmp_path)  # its report has no rules, every document kept
    check_numbers(page, [(plain, manifest)], least=15)
    assert "No document was removed or cut by a rule." in text


def test_a_removed_file_edited_after_the_run_is_refused(cleaned, capsys, tmp_path):
    _, out, manifest, _, _ = cleaned
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    target = copy / manifest["removed"]["files"][0]["path"]
    data = bytearray(target.read_bytes())
    at = data.index(b'"line": ') + len(b'"line": ')
    data[at] = ord("8") if data[at] == ord("9") else data[at] + 1  # another line, the same size
    target.write_bytes(bytes(data))
    status, _, err = _run(capsys, copy)
    assert status == 2 and "not the file the manifest lists" in err


def test_a_megatron_output_too(cleaned, capsys, tmp_path, tiny_model):
    root, _, _, docs, _ = cleaned
    out = tmp_path / "megatron"
    manifest = run.main(["--input", str(root / "c.jsonl"), str(root / "d.parquet"), "--output_dir", str(out),
                         "--tokenizer_model", tiny_model, "--output_format", "megatron",
                         *inspect_corpus.flags(root), *FAST_BEAM])
    capsys.readouterr()  # the job's summary
    shown = _json(capsys, out, "--reason", "c4_quality_cut,gopher_quality")
    assert shown and len(shown) == sum(1 for r in _records(out, manifest)
                                       if r["reason"] in ("c4_quality_cut", "gopher_quality"))
    names = [str(root / "c.jsonl"), str(root / "d.parquet")]
    for item in shown:
        assert item["text"] == docs[(inspect_corpus.FILES.index(item["file"].rsplit("/", 1)[1]), item["line"])][0]
        assert item["file"] in names
    page, _ = render([out], capsys, tmp_path)  # and its report, every number the manifest's
    check_numbers(page, [(out, manifest)], least=20)
