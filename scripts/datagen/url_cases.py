"""URLs for the URL filter's comparison with datatrove: real ones from this machine, crafted hard cases, lists.

    real_urls(n)      the first n distinct http(s) URLs found in /usr/share/doc and the installed packages'
                      metadata (READMEs, changelogs, Project-URL lines), in a fixed order
    crafted(words)    hard cases: IDNs (Unicode and punycode), ports, userinfo, IPv4/IPv6 hosts, mixed case,
                      trailing dots, private suffixes, banned words as words / inside words / in other case,
                      soft-word counts on each side of the threshold, empty and odd strings
    write_lists(dir, urls, assets)  list files in datatrove's names: domains and urls (a sample of the
                      lists datatrove ships, when `assets` is its folder, plus some of `urls`' own hosts and
                      URLs, so every rule fires), and datatrove's three word lists (copied) or small ones

Nothing is downloaded; the same machine gives the same URLs.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sys
import tarfile

URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
ROOTS = ("/usr/share/doc",)


def _files() -> list[str]:
    roots = list(ROOTS) + [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    out = []
    for root in roots:
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for name in sorted(names):
                if name in ("METADATA", "PKG-INFO") or name.lower().startswith(("readme", "changelog", "copyright")):
                    out.append(os.path.join(folder, name))
    return out


def real_urls(n: int) -> list[str]:
    """The first n distinct URLs in this machine's documentation and package metadata (trailing dots/commas cut)."""
    seen: dict[str, None] = {}
    for path in _files():
        try:
            with (gzip.open(path, "rt", errors="replace") if path.endswith(".gz")
                  else open(path, errors="replace")) as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        for url in URL.findall(text):
            seen.setdefault(url.rstrip(".,;:"), None)
            if len(seen) >= n:
                return list(seen)
    return list(seen)


def crafted(banned: str = "porn", soft: tuple[str, ...] = ("sex", "xxx", "babes")) -> list[str]:
    """Hard cases for the host-name split and the word rules (see the module docstring)."""
    a, b, c = soft[0], soft[1], soft[2]
    H = "http://pile-test-host.org"  # a host no list names
    return [
        "http://例え.テスト/path", "http://bücher.de/", "http://xn--bcher-kva.de/", "https://münchen.example.co.uk:8443/x",
        "http://user:pass@blocked-site.com/", "http://user@sub.blocked-site.com:8080/a?b=c", "ftp://blocked-site.com",
        "http://192.168.0.1/admin", "http://8.8.8.8:53/", "http://[2001:db8::1]/x", "http://[::1]:80/",
        "HTTP://Blocked-Site.COM/Page", "http://BLOCKED-SITE.com", "http://blocked-site.com./", "http://blocked-site.com../",
        "http://www.blocked-site.com", "http://deep.sub.blocked-site.com/", "http://blocked-site.co.uk/",
        "http://foo.blogspot.com/", "http://foo.github.io/x", "http://localhost:8000/", "http://localhost./",
        "http://example.invalidtld/", "http://a.b.c.d.e.pile-test-host.org/", "blocked-site.com",
        "//blocked-site.com/x",
        "www.blocked-site.com/path", "https://pile-test-host.org/blocked-site.com", H + "/?u=http://blocked-site.com",
        f"{H}/{banned}", f"{H}/{banned.upper()}", f"{H}/{banned.title()}/x",
        f"http://{banned}hub.pile-test-host.org/", f"{H}/my-{banned}-page", f"{H}/my{banned}page",
        f"{H}/{banned}_{banned}", f"{H}/x.{banned}.y", f"http://{banned}.com/",
        f"{H}/{a}", f"{H}/{a}/{b}", f"{H}/{a}-{b}-{c}",
        f"{H}/{a}/{a}", f"{H}/{a.upper()}/{b.upper()}", f"http://{a}.{b}.com/",
        f"{H}/{a}{b}", f"{H}/?q={a}&r={b}", H + "/a%20b",
        H + "/%70orn", H + "/" + "x" * 3000, "http://", "https://", ":", "/", "#",
        " " + H + "/ ", H + "/\ttab", "http://exa mple.com/", H + "/ümlaut",
        "http://EXAMPLE.com/2girls1cup", H + "/2-girls-1-cup", H + "/two-girls",
        H + "/auto-erotic", H + "/AutoErotic", "mailto:someone@blocked-site.com",
        "http://blocked-site.com:99999/", "http://blocked-site.com:abc/", "http://-blocked-site.com/",
        "http://blocked_site.com/", "http://ＢＬＯＣＫＥＤ-site.com/", "http://blocked-site.com\u3002/",
        "http://sub.blocked-site.com\u3002/", "http://blocked-site。com/", "https://blocked-url.example.org/page?id=1",
        "https://blocked-url.example.org/page?id=1 ", "https://BLOCKED-URL.example.org/page?id=1",
    ]


def write_lists(folder: str, urls: list[str], assets: str | None, every: int = 400) -> dict[str, int]:
    """List files in datatrove's names under `folder`; returns their entry counts."""
    os.makedirs(folder, exist_ok=True)
    domains = ["blocked-site.com", "www.blocked-site.com", "sub.blocked-site.com", "blocked-site.co.uk",
               "foo.blogspot.com", "blogspot.com", "192.168.0.1", "8.8.8.8", "xn--bcher-kva.de", "localhost",
               "# a comment", "#blocked-commented.com", "  padded-domain.org  "]
    # Every 40th real URL's host (as written, mixed case included), every 11th URL itself.
    hosts = [re.sub(r"^[a-z]+://([^/@]*@)?", "", u, flags=re.I).split("/")[0].split(":")[0] for u in urls[::40]]
    domains += hosts
    blocked_urls = ["https://blocked-url.example.org/page?id=1", *urls[::11]]
    if assets:
        with tarfile.open(os.path.join(assets, "url_filterblacklistsv0_3_0.tar.gz"), "r:gz") as tar:
            for member, target in (("domains", domains), ("urls", blocked_urls)):
                stream = tar.extractfile(member)
                target += [line.decode("utf-8", "replace").rstrip("\n")
                           for i, line in enumerate(stream) if i % every == 0]
        for name in ("banned_words.txt", "banned_subwords.txt", "soft_banned_words.txt"):
            shutil.copyfile(os.path.join(assets, name), os.path.join(folder, name))
    else:
        for name, words in (("banned_words.txt", ["porn", "#xx", "Two Girls!"]),
                            ("banned_subwords.txt", ["2 girls 1 cup", "auto erotic"]),
                            ("soft_banned_words.txt", ["sex", "xxx", "babes"])):
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write("\n".join(words) + "\n")
    for name, entries in (("domains", domains), ("urls", blocked_urls)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write("\n".join(entries) + "\n")
    counts = {}
    for name in ("domains", "urls", "banned_words.txt", "banned_subwords.txt", "soft_banned_words.txt"):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            counts[name] = sum(1 for _ in f)
    return counts
