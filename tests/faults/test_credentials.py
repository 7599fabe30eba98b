"""Credentials in a URL are refused before anything runs, and never shown, whatever the secret holds.

AWS secrets hold `/` and `+`; others hold `@`, `:`, `=` or percent-escapes. Where such a userinfo
ends cannot be told from the text, so a URL that may carry one is never shown past its scheme.
"""

from __future__ import annotations

import pytest
from fault_helpers import MODEL, SAMPLE_TRAIN, command, problem_lines

from pipeline.cli import run
from pipeline.io.urls import has_credentials, redact_url

KEY = "AKIAQWERTYUIOPASDFGH"
SECRETS = ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "se@cr/et:with+all=", "plain0secret0without0marks",
           "pct%2Fescaped%40secret", "/leading/slash", "trailing@"]


def _pieces(secret: str) -> list[str]:
    """Every run of 4 characters of the secret: none may appear anywhere."""
    return [secret[i:i + 4] for i in range(len(secret) - 3)]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("flag", ["--input", "--output_dir", "--tokenizer_model"])
def test_a_url_with_credentials_is_refused_and_never_echoed(tmp_path, caplog, flag, secret):
    url = f"s3://{KEY}:{secret}@my-bucket/pile/x.jsonl.zst"
    args = {"--input": SAMPLE_TRAIN, "--output_dir": str(tmp_path / "out"), "--tokenizer_model": MODEL} | {flag: url}
    with pytest.raises(ValueError, match=f"{flag} s3://<credentials removed>: credentials in URLs are refused") as e:
        run.main([a for pair in args.items() for a in pair])
    shown = f"{e.value} {e.value!r} {caplog.text}"
    assert KEY not in shown and not [p for p in _pieces(secret) if p in shown]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("url", [
    f"s3://{KEY}:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY@my-bucket/out",
    f"s3://{KEY}/only/a/token@my-bucket/out",  # an upper-case first segment is no bucket name
])
def test_the_command_exits_2_with_one_line_and_no_secret(tmp_path, url):
    proc = command("--input", SAMPLE_TRAIN, "--output_dir", url, "--tokenizer_model", MODEL)
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert "--output_dir s3://<credentials removed>: credentials in URLs are refused" in line
    secret = url.split("://", 1)[1].rsplit("@", 1)[0]
    assert not [p for p in _pieces(secret) if p in proc.stdout + proc.stderr]


@pytest.mark.parametrize("url", [
    "s3://my-bucket/pile/user@example.com/x.jsonl.zst",  # "@" in a key
    "s3://my-bucket/a:b@c.jsonl.zst",
    "gs://bucket_1/x@y",
    "https://host.example:8443/data/a@b.jsonl",
    "/local/path/with@sign/x.jsonl",
    "s3://my-bucket/plain.jsonl.zst",
])
def test_an_at_sign_after_a_bucket_name_is_not_a_credential(url):
    assert not has_credentials(url) and redact_url(url) == url


@pytest.mark.parametrize("url", [
    "s3://key@bucket/x", "s3://key:secret@bucket/x", "https://user:pass@host/x", "gs://tok:a/b@bucket/x",
    "s3://KEY:12/34@bucket/x",  # looks like host:port, but an object store has no ports
])
def test_userinfo_is_recognised_whatever_it_holds(url):
    assert has_credentials(url) and redact_url(url).endswith("://<credentials removed>")
