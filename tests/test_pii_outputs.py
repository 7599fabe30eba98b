"""With --pii, nothing the job writes holds an address it redacts: dead letters, removed/, manifest, summary, logs."""

import json
import logging

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines

from pipeline.cli import run

pytestmark = pytest.mark.slow

EMAIL, OTHER, IP = "jane.roe@mail-host.net", "bob.smith@corp.example.com", "8.8.4.4"


def _corpus(path: str) -> str:
    twin = json.dumps({"text": f"the same text, from {OTHER}", "id": OTHER, "meta": {"pile_set_name": "ArXiv"}})
    lines = [
        pile_line(f"a first document written by {EMAIL} on {IP} " * 3, "Github"),
        pile_line(f"write to {EMAIL} from {IP}", "CommonCrawl"),  # unknown subset
        pile_line("a name as a subset", OTHER),  # unknown subset: the name in the detail
        f'{{"text": "one {EMAIL}", "text": "two", "meta": {{"pile_set_name": "ArXiv"}}}}'.encode(),  # duplicate_key
        json.dumps({"text": f"mail {EMAIL}", "meta": IP}).encode(),  # meta_not_object
        json.dumps({"text": 5, "id": EMAIL, "meta": {"pile_set_name": "ArXiv"}}).encode(),  # text_not_string
        twin.encode(),
        twin.encode(),  # a duplicate: removed/ lists it, with its id
        pile_line(f"and a last one, {OTHER} " * 4, "ArXiv"),
    ]
    return write_lines(path, lines, compression="none")


def test_nothing_the_job_writes_holds_an_address_it_redacts(tmp_path, capfd, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "out"
    manifest = run.main(["--input", _corpus(str(tmp_path / "in.jsonl")), "--output_dir", str(out), "--tokenizer_model",
                         "tokenizers/sample/sample.model", "--pii", "email,ip", "--dedup", "exact", "--id_key", "id",
                         "--seq_len", "16", "--max_dead_letter_fraction", "1", *FAST_BEAM])
    assert manifest["dead_letters"]["by_reason"] == {"duplicate_key": 1, "meta_not_object": 1, "subset_unknown": 2,
                                                     "text_not_string": 1}
    assert manifest["removed"]["by_reason"] == {"duplicate_exact": 1}
    tallies = {name: s.get("tallies", {}).get("pii") for name, s in manifest["subsets"].items()}
    assert tallies == {"ArXiv": {"email": 5}, "Github": {"email": 3, "ip": 3}}
    written = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any("dead_letters" in str(p) for p in written) and any("removed" in str(p) for p in written)
    logs = capfd.readouterr()
    seen = {"files": b"".join(written.values()).decode("utf-8", "replace"), "logs": logs.out + logs.err + caplog.text}
    assert {where: [a for a in (EMAIL, OTHER, IP) if a in text] for where, text in seen.items()} == {
        "files": [], "logs": []}
    assert "email@example.com" in seen["files"]
    assert "pii: email 8, ip 3" in seen["logs"]  # the summary's line of the stage's counts
