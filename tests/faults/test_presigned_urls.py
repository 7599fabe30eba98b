"""A presigned URL's signature, credential and token never appear anywhere: logs, errors, the
manifest, dead letters, progress or the summary; nor does userinfo in a malformed URL.

A real job reads its input through a presigned URL of the loopback S3 server (SigV2 and SigV4,
as boto3 signs them), and every byte it wrote or printed is searched for the secrets.
"""

from __future__ import annotations

import socket
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from corpus_helpers import pile_line, write_lines
from fault_helpers import MODEL, PROCESSES, command, problem_lines

from pipeline.io.urls import has_credentials, redact_text, redact_url


def _presigned(env, bucket: str, key: str, version: str) -> str:
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], config=Config(signature_version=version))
    return client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)


def _secrets(url: str) -> list[str]:
    """The values of the URL's secret parameters, as written and decoded."""
    from urllib.parse import parse_qsl, urlsplit

    raw = dict(p.split("=", 1) for p in urlsplit(url).query.split("&"))
    decoded = dict(parse_qsl(urlsplit(url).query))
    names = [n for n in raw if n in ("Signature", "AWSAccessKeyId", "X-Amz-Credential", "X-Amz-Signature")]
    assert len(names) == 2, url
    return [v for n in names for v in (raw[n], decoded[n])]


def _everything(out: Path, proc) -> str:
    texts = [proc.stdout, proc.stderr]
    texts += [p.read_bytes().decode("utf-8", "replace") for p in out.rglob("*") if p.is_file()]
    return "\n".join(texts)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["s3", "s3v4"])
def test_a_job_reading_a_presigned_url_shows_none_of_its_secrets(s3, tmp_path, version):
    fs, env, bucket = s3
    local = tmp_path / "part.jsonl.zst"
    lines = [pile_line(f"document {i} " + "words " * 30, "Wikipedia (en)") for i in range(50)]
    write_lines(str(local), lines[:10] + [b"{broken json"] + lines[10:])  # one dead letter, naming its file
    key = f"presigned-{version}/part.jsonl.zst"
    fs.put(str(local), f"{bucket}/{key}")
    url = _presigned(env, bucket, key, version)
    out = tmp_path / "out"
    proc = command("--input", url, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   "--progress_every", "0.1", *PROCESSES, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "manifest.json").exists()
    shown = _everything(out, proc)
    assert "<removed>" in shown  # the URL is shown, without its secrets
    assert not [s for s in _secrets(url) if s in shown]


@pytest.mark.slow
def test_an_unreachable_presigned_url_is_named_without_its_secrets(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = (f"http://127.0.0.1:{port}/b/x.jsonl.zst?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDSECRETID"
           "%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=0123456789abcdefSIGNATURE")
    proc = command("--input", url, "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert "X-Amz-Signature=<removed>" in line
    assert "AKIDSECRETID" not in proc.stderr and "SIGNATURE" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("url", ["s3:/AKIDTYPO:SECRETTYPO@bucket/x.jsonl.zst", "s3:AKIDTYPO:SECRETTYPO@bucket/x",
                                 "s3:///AKIDTYPO:SECRETTYPO@bucket/x"])
def test_userinfo_in_a_malformed_url_is_refused_and_never_echoed(tmp_path, url):
    proc = command("--input", url, "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert "credentials in URLs are refused" in line
    assert "AKIDTYPO" not in proc.stderr and "SECRETTYPO" not in proc.stderr


@pytest.mark.parametrize("url, shown", [
    ("https://h/k?X-Goog-Algorithm=GOOG4&X-Goog-Credential=c&X-Goog-Signature=s", "https://h/k?X-Goog-Algorithm=GOOG4&"
     "X-Goog-Credential=<removed>&X-Goog-Signature=<removed>"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022&sp=r&sig=abc%3D", "https://acct.blob.core.windows.net/c/b?sv=2022&"
     "sp=r&sig=<removed>"),
    ("https://h/k?X-Amz-Security-Token=t&x=1", "https://h/k?X-Amz-Security-Token=<removed>&x=1"),
    ("https://h/k?token=t", "https://h/k?token=<removed>"),
    ("s3://bucket/file?.jsonl.zst", "s3://bucket/file?.jsonl.zst"),  # a glob, not a query
    ("data/x?.jsonl", "data/x?.jsonl"),
])
def test_every_clouds_signature_parameters_are_removed(url, shown):
    assert redact_url(url) == shown
    assert redact_text(f"cannot read {url}: gone") == f"cannot read {shown}: gone"
    assert not has_credentials(url)


SECRET = "0123456789abcdefSIGNATURE"


@pytest.mark.parametrize("url, shown", [
    # The secret after a `;` was shown: a URL in a message was cut at the `;`, and a query split on `&` only.
    (f"https://h/k?response-content-type=text/x;X-Amz-Signature={SECRET}",
     "https://h/k?response-content-type=text/x;X-Amz-Signature=<removed>"),
    (f"https://h/k;X-Amz-Signature={SECRET}", "https://h/k;X-Amz-Signature=<removed>"),
    (f"https://h/k?a=text/x,X-Amz-Signature={SECRET}", "https://h/k?a=text/x,X-Amz-Signature=<removed>"),
    (f"https://h/k#access_token={SECRET}", "https://h/k#access_token=<removed>"),
    (f"https://h/k?x=1#sig={SECRET}&y=2", "https://h/k?x=1#sig=<removed>&y=2"),
    (f"https://h/k?x-amz-signature={SECRET}", "https://h/k?x-amz-signature=<removed>"),
    (f"https://h/k?SIG={SECRET}", "https://h/k?SIG=<removed>"),
    (f"https://h/k?X-Amz-%53ignature={SECRET}", "https://h/k?X-Amz-%53ignature=<removed>"),
    (f"https://h/k?a=1?Signature={SECRET}", "https://h/k?a=1?Signature=<removed>"),
])
def test_secret_parameters_after_any_separator_are_removed(url, shown):
    assert redact_url(url) == shown
    for text in (f"cannot read {url}: gone", f"cannot read {url}; the job stops", f"({url})", f"'{url}'"):
        assert SECRET not in redact_text(text), text
    assert redact_text(f"cannot read {url}: gone") == f"cannot read {shown}: gone"


def test_a_url_after_a_semicolon_is_still_a_url_of_its_own():
    text = "s3://bucket/x;s3://AKIDX:SECRETX@bucket/y"
    assert "SECRETX" not in redact_text(text) and "s3://bucket/x" in redact_text(text)


@pytest.mark.slow
def test_an_unreachable_url_with_a_signature_after_a_semicolon_is_named_without_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/b/x.jsonl.zst?response-content-type=text/x;X-Amz-Signature={SECRET}"
    proc = command("--input", url, "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert "X-Amz-Signature=<removed>" in line
    assert SECRET not in proc.stderr and "SIGNATURE" not in proc.stderr
