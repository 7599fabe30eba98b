"""pii: e-mail and public IP addresses replaced, as datatrove 0.10.1's `PIIFormatter` replaces them.

Its regular expressions and placeholders, verbatim: every e-mail address becomes, in turn,
"email@example.com" then "firstname.lastname@example.org"; every IPv4 address that
`ipaddress.ip_address(...).is_global` calls public becomes, in turn, one of six addresses that did
not answer when datatrove's authors drew them (private, loopback and reserved ones stay). E-mails
are replaced first, then IPs, as datatrove does.

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

EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
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


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def redact(text: str, kinds: tuple[str, ...]) -> tuple[str, dict[str, int]]:
    """(the text with the chosen kinds replaced, {kind: replacements}) - only kinds with any counted."""
    counts: dict[str, int] = {}
    if "email" in kinds and "@" in text:
        turn = [0]

        def email(_match: re.Match) -> str:
            turn[0] += 1
            return EMAIL_REPLACEMENTS[(turn[0] - 1) % len(EMAIL_REPLACEMENTS)]

        text = EMAIL.sub(email, text)
        if turn[0]:
            counts["email"] = turn[0]
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
