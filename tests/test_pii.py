"""PII redaction: datatrove's placeholders for planted e-mail and public IP addresses; private ones kept.

The e-mail matches are datatrove's pattern's, found in linear time (`email_spans`): fuzzed against
the pattern itself on texts of its own characters.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages.pii import EMAIL, EMAIL_REPLACEMENTS, IP_REPLACEMENTS, email_spans, parse_kinds, redact


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


def test_a_kind_named_twice_is_refused():
    for value in ("email,email", "ip, IP", ["ip", "ip"]):
        with pytest.raises(ValueError, match="named twice"):
            parse_kinds(value)


# datatrove 0.10.1's PIIFormatter's e-mail pattern, as its source spells it
DATATROVE_EMAIL = (
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
PIECES = ["a", "b", "Z", "0", "1", "25", "9", ".", "..", "@", "-", "_", "'", "!", "+", "[", "]", ":", " ", "\n", "é",
          "\u00df", "@a.b", "a@", ".@", "@.", "[1.2.3.4]", "[255.0.0.1]", "[a-b:]", "x.y", "a-b", "@[", "1.1", "é@"]


def test_the_email_pattern_is_datatroves():
    assert EMAIL.pattern == DATATROVE_EMAIL


@pytest.mark.slow  # thousands of texts through the regex and the linear reading
@settings(max_examples=3000, deadline=None, database=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_the_linear_email_matches_are_the_patterns(parts):
    # the regex's own matches (it finishes on these short texts) against the linear reading of its shape
    text = "".join(parts)
    assert email_spans(text) == [m.span() for m in EMAIL.finditer(text)]
    turn = iter(range(1 << 20))
    expected = EMAIL.sub(lambda _: EMAIL_REPLACEMENTS[next(turn) % 2], text)
    assert redact(text, ("email",))[0] == expected


def test_the_shapes_datatroves_pattern_takes_seconds_on_are_read_in_milliseconds():
    for text in ("x@ " + "a-" * 24_000, "b." * 36_000 + "b@" + "a" * 36_000, "a@" * 50_000):
        start = time.process_time()
        assert redact(text, ("email", "ip")) == (text, {})
        assert time.process_time() - start < 1.0  # the pattern itself: 26-28 s on the first two
