"""Hostile input lines never kill the job: each becomes a document or a dead letter with a reason.

Guaranteed here (pipeline/core/documents.py):
- Any line, whatever it holds, validates to a document or raises BadRecord (a stable reason code):
  every JSON type in the text, in `meta`, in the subset key and at the top level; nesting far
  deeper than the parser follows (`too_deep`); integers longer than Python converts; NaN and
  Infinity; keys that are not strings (invalid JSON); lone surrogates; control characters.
- The job over a corpus of such lines exits normally, every hostile line is a dead letter naming
  its file, line, offset and reason, and the counts add up (lines = documents + dead letters).
- A UTF-8 byte-order mark at the start of a file is dropped, not a dead letter, and counted in the
  manifest's per-file stats (`byte_order_mark`).
- Duplicate keys: on the path to the text or the subset name they make the line ambiguous (a dead
  letter, `duplicate_key`); anywhere else the document is kept (last value wins). Both are counted
  per file (`duplicate_keys.ambiguous`, `duplicate_keys.elsewhere`).
"""

import itertools
import json
from collections import Counter

import pytest
from corpus_helpers import FAST_BEAM

from pipeline.cli import run
from pipeline.core import documents
from pipeline.core.subsets import PILE_SUBSETS

# Every JSON type, as raw JSON text (so NaN, huge numbers and nesting survive as written).
DEEP = 100_000
VALUES = {
    "null": "null", "true": "true", "false": "false", "zero": "0", "negative": "-1", "float": "1.5",
    "overflow_float": "1e400", "huge_int": "9" * 5000, "nan": "NaN", "infinity": "Infinity",
    "minus_infinity": "-Infinity", "empty_string": '""', "string": '"plain text"', "pile_name": '"Github"',
    "lower_pile_name": '"github"', "surrogate": '"\\ud800"', "control": '"a\\u0000b"', "empty_list": "[]",
    "list": '["Github"]', "empty_object": "{}", "object": '{"pile_set_name": "Github"}',
    "deep_list": "[" * DEEP + "]" * DEEP, "deep_object": '{"a":' * DEEP + "1" + "}" * DEEP,
}


def _hostile_lines() -> list[tuple[str, bytes]]:
    """(name, raw line): every value in the text, in meta, in pile_set_name, and at the top level."""
    out = []
    for name, value in VALUES.items():
        out.append((f"text={name}", f'{{"text": {value}, "meta": {{"pile_set_name": "Github"}}}}'.encode()))
        out.append((f"meta={name}", f'{{"text": "ok", "meta": {value}}}'.encode()))
        out.append((f"subset={name}", f'{{"text": "ok", "meta": {{"pile_set_name": {value}}}}}'.encode()))
        out.append((f"top={name}", value.encode()))
        out.append((f"elsewhere={name}", f'{{"text": "ok", "meta": {{"pile_set_name": "Github", "x": {value}}}}}'
                    .encode()))
    out += [
        ("non_string_key", b'{"text": "ok", 1: "x", "meta": {"pile_set_name": "Github"}}'),
        ("single_quotes", b"{'text': 'ok'}"),
        ("trailing_comma", b'{"text": "ok", "meta": {"pile_set_name": "Github"},}'),
        ("truncated", b'{"text": "ok", "meta": {"pile_set_name": "Git'),
        ("two_objects", b'{"text": "a"} {"text": "b"}'),
        ("bom_not_at_start", b'\xef\xbb\xbf{"text": "ok", "meta": {"pile_set_name": "Github"}}'),
        ("utf16", '{"text": "ok"}'.encode("utf-16")),
        ("nul_bytes", b"\x00\x00\x00"),
        ("dup_text", b'{"text": "a", "text": "b", "meta": {"pile_set_name": "Github"}}'),
        ("dup_meta", b'{"text": "a", "meta": {"pile_set_name": "Github"}, "meta": {"pile_set_name": "ArXiv"}}'),
        ("dup_subset", b'{"text": "a", "meta": {"pile_set_name": "Github", "pile_set_name": "ArXiv"}}'),
        ("dup_elsewhere", b'{"text": "a", "meta": {"pile_set_name": "Github", "u": 1, "u": 2}, "x": 0, "x": 1}'),
        ("many_keys", json.dumps({"text": "ok", "meta": {"pile_set_name": "Github"},
                                  **{f"k{i}": i for i in range(20_000)}}).encode()),
    ]
    return out


LINES = _hostile_lines()


def _outcome(raw: bytes, schema=documents.PILE, number: int = 2, offset: int = 100):
    try:
        doc = documents.parse_document(documents.Line(number, offset, raw), 1 << 24, schema)
    except documents.BadRecord as bad:
        return bad.reason
    return doc


@pytest.mark.parametrize("name,raw", LINES, ids=[name for name, _ in LINES])
def test_a_hostile_line_is_a_document_or_a_dead_letter(name, raw):
    outcome = _outcome(raw)  # anything but BadRecord escaping here fails the test
    assert isinstance(outcome, str | documents.Document)


# What each field's value must give (the rest of the line being valid).
EXPECTED = {
    "text=string": "doc", "text=empty_string": "doc", "text=control": "doc", "text=pile_name": "doc",
    "text=lower_pile_name": "doc",
    "text=surrogate": "invalid_unicode", "text=deep_list": "too_deep", "text=deep_object": "too_deep",
    "meta=object": "doc", "meta=null": "meta_missing", "meta=empty_object": "subset_missing",
    "meta=deep_list": "too_deep", "meta=deep_object": "too_deep",
    "subset=pile_name": "doc", "subset=null": "subset_missing", "subset=empty_string": "subset_missing",
    "subset=string": "subset_unknown", "subset=lower_pile_name": "subset_unknown",
    "subset=surrogate": "invalid_unicode", "subset=control": "subset_unknown",
    "subset=deep_list": "too_deep", "subset=deep_object": "too_deep",
    "top=object": "text_missing", "top=empty_object": "text_missing", "top=deep_object": "too_deep",
    "top=deep_list": "too_deep", "top=empty_string": "not_an_object",
    "non_string_key": "invalid_json", "single_quotes": "invalid_json", "trailing_comma": "invalid_json",
    "truncated": "invalid_json", "two_objects": "invalid_json", "bom_not_at_start": "invalid_json",
    "utf16": "invalid_utf8", "nul_bytes": "invalid_json",
    "dup_text": "duplicate_key", "dup_meta": "duplicate_key", "dup_subset": "duplicate_key",
    "dup_elsewhere": "doc", "many_keys": "doc",
}
for _name in VALUES:
    EXPECTED.setdefault(f"text={_name}", "text_not_string")
    EXPECTED.setdefault(f"meta={_name}", "meta_not_object")
    EXPECTED.setdefault(f"subset={_name}", "subset_not_string")
    EXPECTED.setdefault(f"top={_name}", "not_an_object")
    # A value we do not read never costs the document, however odd (huge integers included) ...
    EXPECTED.setdefault(f"elsewhere={_name}", "doc")
# ... unless the parser cannot follow it at all.
EXPECTED["elsewhere=deep_list"] = EXPECTED["elsewhere=deep_object"] = "too_deep"


def test_every_hostile_line_gets_the_expected_outcome():
    got = {}
    for name, raw in LINES:
        outcome = _outcome(raw)
        got[name] = "doc" if isinstance(outcome, documents.Document) else outcome
    assert got == {name: EXPECTED[name] for name, _ in LINES}


# Lines where a repeated key hides from a plain count of `":` (escaped quotes, keys ending in a
# backslash, whitespace before the colon, strings starting with a colon, objects inside lists).
REPEATS = [
    b'{"a\\": 1, "a\\": 2, "text": "ok", "b": ":x", "meta": {"pile_set_name": "Github"}}',
    b'{"text": "say \\"k\\": v", "x": 1, "x": 2, "meta": {"pile_set_name": "Github"}}',
    b'{"text" : "ok", "x" :1, "x"\t:2, "meta" : {"pile_set_name" : "Github"}}',
    b'{"text": "ok", "meta": {"pile_set_name": "Github"}, "l": [{"k": 1, "k": 2}]}',
    b'{"text": "ends\\\\", "x": 1, "x": 2, "meta": {"pile_set_name": "Github"}}',
    b'{"text": "ok", "meta": {"pile_set_name": "Github", "pile_set_name": "Github"}}',
]
# A repeated key on the read path beside a key that ends in escaped backslashes (its closing quote is
# not escaped) or in an escaped quote: a count that took either wrongly would miss the repeat.
AMBIGUOUS_BESIDE_ESCAPES = [
    b'{"text":"a","text":"b","k\\\\":1,"meta":{"pile_set_name":"Github"}}',
    b'{"text": "a", "meta": {"pile_set_name": "Github", "pile_set_name": "ArXiv", "k\\\\\\\\": 1}}',
    b'{"x\\\\\\"": 1, "text": "a", "text": "b", "y\\\\": 2, "meta": {"pile_set_name": "Github"}}',
    b'{"text": "a\\\\", "meta": {"pile_set_name": "Github"}, "meta": {"pile_set_name": "ArXiv"}, "\\\\": 0}',
]
REPEATS += AMBIGUOUS_BESIDE_ESCAPES


def _full_path(raw: bytes, monkeypatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(documents, "_parse_plain", lambda data, schema: None)
        return _outcome(raw)


def test_the_orjson_path_gives_what_json_gives_or_steps_aside(monkeypatch):
    # Every hostile line, the repeats and the usual shapes: the outcome is the same with and without
    # the orjson path (documents equal, dead letters with the same reason).
    plain = [b'{"text": "caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\"q\\": 1", "meta": {"pile_set_name": "Github"}}',
             b'{"meta": {"pile_set_name": "ArXiv"}, "text": "x", "extra": [1, {"y": null}]}']
    for raw in [r for _, r in LINES] + REPEATS + plain:
        assert _outcome(raw) == _full_path(raw, monkeypatch), raw[:80]
    for raw in REPEATS:  # a line with a repeated key never takes the orjson path
        assert documents._parse_plain(raw, documents.PILE) is None, raw
    for raw in plain:  # the usual lines do
        assert documents._parse_plain(raw, documents.PILE) == _outcome(raw), raw


def test_a_repeat_beside_escaped_backslashes_is_a_duplicate_key_dead_letter():
    for raw in AMBIGUOUS_BESIDE_ESCAPES:
        assert _outcome(raw) == "duplicate_key", raw
        assert documents._parse_plain(raw, documents.PILE) is None, raw


def test_any_subset_names_refuse_what_cannot_be_a_name():
    schema = documents.Schema(any_names=True)
    for value, reason in (('"x\\u0007y"', "subset_invalid"), ('"   "', "subset_invalid"),
                          ('"' + "n" * 201 + '"', "subset_invalid"), ('"\\ud800"', "invalid_unicode"),
                          ("[]", "subset_not_string"), ('"my own name"', "doc")):
        outcome = _outcome(f'{{"text": "ok", "meta": {{"pile_set_name": {value}}}}}'.encode(), schema)
        assert (outcome if isinstance(outcome, str) else "doc") == reason, value


def test_an_unforeseen_exception_is_a_dead_letter(monkeypatch):
    def boom(*_):
        raise KeyError("something nobody foresaw")

    monkeypatch.setattr(documents, "_subset", boom)
    assert _outcome(b'{"text": "ok", "meta": {"pile_set_name": "Github"}}') == "invalid_record"


def test_a_byte_order_mark_is_dropped_only_at_the_start_of_a_file():
    raw = documents.BYTE_ORDER_MARK + b'{"text": "ok", "meta": {"pile_set_name": "Github"}}'
    first = documents.Line(1, 0, raw)
    assert documents.has_byte_order_mark(first)
    assert documents.parse_document(first, 1 << 20) == documents.Document("ok", "Github")
    with pytest.raises(documents.BadRecord, match="invalid_json"):
        documents.parse_document(documents.Line(2, 57, raw), 1 << 20)


# The job, over files of these lines ------------------------------------------------------------

def _write(path, lines: list[bytes], bom: bool = False):
    path.write_bytes((documents.BYTE_ORDER_MARK if bom else b"") + b"\n".join(lines) + b"\n")
    return path


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("hostile")
    good = [json.dumps({"text": f"good document {i}", "meta": {"pile_set_name": PILE_SUBSETS[i % 22]}}).encode()
            for i in range(30)]
    # Good lines between the hostile ones, so that "the rest of the file" is seen to survive.
    hostile = [line for pair in itertools.zip_longest([raw for _, raw in LINES], good) for line in pair if line]
    files = [
        _write(root / "a-hostile.jsonl", hostile),
        _write(root / "b-bom.jsonl", good[:5], bom=True),
        _write(root / "c-duplicates.jsonl", [raw for name, raw in LINES if name.startswith("dup_")] + good[:3]),
    ]
    out = root / "out"
    # Mostly hostile lines: far more dead letters than a job accepts by default.
    manifest = run.main(["--input", *map(str, files), "--output_dir", str(out), "--tokenizer_model", tiny_model,
                         "--seq_len", "32", "--max_dead_letter_fraction", "1", *FAST_BEAM])
    return files, out, manifest


def _dead_letters(out) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("run-*/dead_letters/*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_the_job_dead_letters_exactly_the_hostile_lines_and_the_counts_add_up(hostile_run):
    files, out, manifest = hostile_run
    dead = _dead_letters(out)
    for record in dead:
        assert {"file", "line", "offset", "reason", "detail", "prefix"} <= set(record)
    expected = []
    for path in files:
        offset = 0
        for number, raw in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
            outcome = _outcome(raw, number=number, offset=offset)
            if isinstance(outcome, str):
                expected.append((str(path), number, offset, outcome))
            offset += len(raw) + 1
    got = [(d["file"], d["line"], d["offset"], d["reason"]) for d in dead]
    assert sorted(got) == sorted(expected)
    kept = sum(s["documents"] for s in manifest["subsets"].values())
    assert manifest["totals"]["lines"] == kept + manifest["dead_letters"]["records"] == sum(
        len(p.read_bytes().split(b"\n")) - 1 for p in files)
    assert manifest["dead_letters"]["by_reason"] == dict(Counter(d["reason"] for d in dead))
    assert manifest["totals"]["records"] > 0


@pytest.mark.slow
def test_a_byte_order_mark_costs_no_document_and_is_counted(hostile_run):
    files, out, manifest = hostile_run
    stats = {entry["path"]: entry for entry in manifest["inputs"]}
    assert stats[str(files[1])]["byte_order_mark"] == 1
    assert stats[str(files[0])]["byte_order_mark"] == stats[str(files[2])]["byte_order_mark"] == 0
    assert not [d for d in _dead_letters(out) if d["file"] == str(files[1])]


@pytest.mark.slow
def test_duplicate_keys_are_dead_letters_on_the_read_path_and_counted_per_file(hostile_run):
    files, out, manifest = hostile_run
    stats = {entry["path"]: entry for entry in manifest["inputs"]}
    # c-duplicates: dup_text, dup_meta, dup_subset are ambiguous; dup_elsewhere is kept.
    assert stats[str(files[2])]["duplicate_keys"] == {"ambiguous": 3, "elsewhere": 1}
    assert stats[str(files[0])]["duplicate_keys"] == {"ambiguous": 3, "elsewhere": 1}
    dead = [d for d in _dead_letters(out) if d["file"] == str(files[2])]
    assert [d["reason"] for d in dead] == ["duplicate_key"] * 3
