"""PII redaction: datatrove's placeholders for planted e-mail and public IP addresses; private ones kept."""

from __future__ import annotations

import pytest

from pipeline.stages.pii import EMAIL_REPLACEMENTS, IP_REPLACEMENTS, parse_kinds, redact


def test_planted_addresses_are_replaced_in_turn_and_counted():
    text = ("Write to alice@example.net or bob.smith+tag@mail.co.uk, and carol@[192.168.0.1].\n"
            "Servers 8.8.8.8, 1.1.1.1 and 9.9.9.9 are public; 10.0.0.1, 192.168.1.20, 127.0.0.1 are not.\n"
            "Inside longer runs, as datatrove's unanchored pattern finds them: 999.1.1.1, v1.2.3.4.5; not a@b")
    out, counts = redact(text, ("email", "ip"))
    assert counts == {"email": 3, "ip": 5}
    assert out == ("Write to email@example.com or firstname.lastname@example.org, and email@example.com.\n"
                   "Servers 22.214.171.124, 126.96.36.199 and 188.8.131.52 are public; 10.0.0.1, 192.168.1.20, "
                   "127.0.0.1 are not.\nInside longer runs, as datatrove's unanchored pattern finds them: "
                   "9184.108.40.206, v220.127.116.11.5; not a@b")


def test_the_turn_starts_again_with_every_document():
    a, _ = redact("x@y.com z@w.org", ("email",))
    b, _ = redact("q@r.com", ("email",))
    assert a == f"{EMAIL_REPLACEMENTS[0]} {EMAIL_REPLACEMENTS[1]}" and b == EMAIL_REPLACEMENTS[0]
    many, counts = redact(" ".join(f"8.8.8.{i}" for i in range(1, 8)), ("ip",))
    assert many.split() == [*IP_REPLACEMENTS, IP_REPLACEMENTS[0]] and counts == {"ip": 7}


def test_only_the_chosen_kinds():
    text = "mail me@host.org from 8.8.4.4"
    assert redact(text, ("ip",)) == ("mail me@host.org from 22.214.171.124", {"ip": 1})
    assert redact(text, ("email",)) == ("mail email@example.com from 8.8.4.4", {"email": 1})
    assert redact(text, ()) == (text, {})


def test_kinds_flag():
    assert parse_kinds("ip,email") == ("email", "ip")
    assert parse_kinds("none") == ()
    with pytest.raises(ValueError, match="--pii takes email,ip"):
        parse_kinds("phone")
