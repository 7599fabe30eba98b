"""pii: e-mail and public IP addresses replaced, as datatrove 0.10.1's `PIIFormatter` replaces them.

Its regular expressions and placeholders, verbatim: every e-mail address becomes, in turn,
"email@example.com" then "firstname.lastname@example.org"; every IPv4 address that
`ipaddress.ip_address(...).is_global` calls public becomes, in turn, one of six addresses that did
not answer when datatrove's authors drew them (private, loopback and reserved ones stay). E-mails
are replaced first, then IPs, as datatrove does. The e-mail pattern's matches are found in time
linear in the text (`email_spans`), where Python's backtracking on the pattern is quadratic.

One difference, on purpose: datatrove's turn ("in turn") goes on from one document to the next
within a worker, so a document's placeholders depend on which worker read which documents before
it; here the turn starts again with every document, so that the output is the same on any number
of workers. A document's text is datatrove's whenever datatrove's formatter starts fresh on it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from pipeline.core.options import option
from pipeline.stages.base import Doc, DocumentStage, Keep

# datatrove's e-mail pattern, in its parts: LOCAL (characters of the part before "@", besides "."), the
# local part, the domain. EMAIL is its text verbatim (tests/test_pii.py checks the parts join to it).
LOCAL = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
DOMAIN = re.compile(
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4]"
    r"[0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
EMAIL = re.compile(rf"\b[{LOCAL}]+(?:\.[{LOCAL}]+)*@" + DOMAIN.pattern)
_LOCAL_RUN = re.compile(rf"[.{LOCAL}]*")  # read backwards from an "@": where its local part can start
_LOCAL_START = re.compile(rf"\b[{LOCAL}]")
_LOCAL_CHARS = frozenset(filter(re.compile(f"[{LOCAL}]").fullmatch, map(chr, range(128))))  # all ASCII
IP = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)")
EMAIL_REPLACEMENTS = ("email@example.com", "firstname.lastname@example.org")
IP_REPLACEMENTS = ("22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11",
                   "18.104.22.168")
KINDS = ("email", "ip")


def parse_kinds(value) -> tuple[str, ...]:
    """Parse "email,ip" (or a TOML list) -> ("email", "ip"); "none" or "": nothing."""
    items = [value] if isinstance(value, str) else list(value)
    kinds = tuple(k.strip().lower() for item in items for k in str(item).split(",") if k.strip())
    if kinds in ((), ("none",)):
        return ()
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"--pii takes {','.join(KINDS)} (comma-separated), got {','.join(unknown)}")
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"--pii {','.join(kinds)}: a kind named twice")
    return tuple(k for k in KINDS if k in kinds)


@dataclasses.dataclass(frozen=True)
class PiiOptions:
    """What --pii replaces (the pii stage is on when it names anything)."""

    pii: tuple = option((), parse=parse_kinds, metavar="email,ip", shown_default="none",
                        help="replace e-mail addresses and/or public IP addresses with datatrove's PIIFormatter "
                        "placeholders (counted per subset); the text written is the redacted one")

    def __post_init__(self):
        if sorted(parse_kinds(self.pii)) != sorted(self.pii):  # made in code: the same checks
            raise ValueError(f"--pii {','.join(self.pii)}: give kinds among {', '.join(KINDS)}, each once")


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def email_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every match of EMAIL, as `EMAIL.finditer` gives them, in time linear in the text.

    Python's backtracking takes time quadratic in the text on some inputs (a long run of local-part
    characters before an "@" that starts no e-mail, tried from every word boundary in it). The
    matches are found from the pattern's shape instead: the local part (local characters and single
    dots, starting and ending with a local character) reaches from its start exactly to the next
    character outside [LOCAL.], which must be the "@"; so for each "@", in order, the match is the
    leftmost word boundary before a local character in that run (after the last ".." in it, and at
    or after the end of the last match) to the domain's own match after the "@" (DOMAIN, the end of
    the pattern, matched once per "@"). Each "@" reads its run and its domain once; runs of two
    "@"s do not overlap, nor do their domains.
    """
    spans: list[tuple[int, int]] = []
    at = text.find("@")
    if at < 0:
        return spans
    size = len(text)
    backwards = text[::-1]  # text[i] is backwards[size - 1 - i]
    done = 0  # the end of the last match: matches do not overlap
    while at >= 0:
        if at > done and text[at - 1] in _LOCAL_CHARS:  # the local part ends with a local character
            low = size - _LOCAL_RUN.match(backwards, size - at, size - done).end()  # where the run starts
            double = text.rfind("..", low, at)
            if double >= 0:
                low = double + 1
            domain = DOMAIN.match(text, at + 1)
            start = _LOCAL_START.search(text, low, at) if domain is not None else None
            if start is not None:
                spans.append((start.start(), domain.end()))
                done = domain.end()
                at = text.find("@", done)
                continue
        at = text.find("@", at + 1)
    return spans


def redact(text: str, kinds: tuple[str, ...]) -> tuple[str, dict[str, int]]:
    """(the text with the chosen kinds replaced, {kind: replacements}) - only kinds with any counted.

    The stage's redaction, also for other callers (dead letters): kinds from KINDS, in any order.
    """
    counts: dict[str, int] = {}
    if "email" in kinds and "@" in text:
        spans = email_spans(text)
        if spans:
            pieces, last = [], 0
            for i, (start, end) in enumerate(spans):
                pieces += [text[last:start], EMAIL_REPLACEMENTS[i % len(EMAIL_REPLACEMENTS)]]
                last = end
            pieces.append(text[last:])
            text = "".join(pieces)
            counts["email"] = len(spans)
    if "ip" in kinds and "." in text:
        turn = [0]

        def ip(match: re.Match) -> str:
            if not _public(match.group(0)):
                return match.group(0)
            turn[0] += 1
            return IP_REPLACEMENTS[(turn[0] - 1) % len(IP_REPLACEMENTS)]

        text = IP.sub(ip, text)
        if turn[0]:
            counts["ip"] = turn[0]
    return text, counts


class Pii(DocumentStage):
    """--pii (the module docstring): kept, redacted, replacements counted per subset."""

    name = "pii"
    Options = PiiOptions

    @classmethod
    def switched_on(cls, options) -> bool:
        """On when --pii names a kind."""
        return bool(options.pii)

    def check(self) -> None:
        """A kind named (--filters pii alone would change nothing)."""
        if not self.options.pii:
            raise ValueError("--pii: name what to replace (email, ip or email,ip)")

    def apply(self, doc: Doc) -> Keep | None:
        """The redacted text and its counts, or None when nothing was replaced."""
        text, counts = redact(doc.text, self.options.pii)
        return Keep(text=text, tally=counts) if counts else None
