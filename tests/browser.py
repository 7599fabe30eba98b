"""A page opened in a real headless Chromium, driven over the DevTools protocol on a pipe (no driver package).

`chromium --headless --remote-debugging-pipe` reads DevTools commands as NUL-terminated JSON on its
fd 3 and answers on fd 4: enough to open a file, wait for its load event, read what it laid out
(images' natural and drawn sizes, the title, the scripts), collect console messages, uncaught
exceptions and the browser's own log errors (a refused fetch, a Content-Security-Policy violation),
and take a full-page screenshot. No selenium, no chromedriver whose version must match the
browser's: the only thing to install is the browser (scripts/setup_browser.sh: Debian's chromium).

Where no browser is installed the tests that need one skip, saying so; in scripts/test.sh's
environment (PILE_REQUIRE_BROWSER=1) they fail instead.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"  # screenshots kept for a person to look at (git ignores it)
NAMES = ("chromium", "chromium-browser", "google-chrome")
MISSING = ("no Chromium on this machine (looked for chromium, chromium-browser, google-chrome): the page was NOT "
           "checked in a browser; bash scripts/setup_browser.sh installs Debian's chromium")


def chromium() -> str:
    """The browser's path; skips the test without one (fails it where scripts/test.sh requires one)."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("PILE_REQUIRE_BROWSER") == "1":
        pytest.fail(MISSING)
    pytest.skip(MISSING)


class _DevTools:
    def __init__(self, browser: str, profile: str, timeout: float):
        ours_to_it, its_in = map(_high, os.pipe())
        its_out, ours_from_it = map(_high, os.pipe())
        self._deadline = time.monotonic() + timeout

        def fds():  # the browser reads commands on fd 3 and writes answers on fd 4
            os.dup2(ours_to_it, 3)
            os.dup2(ours_from_it, 4)

        self.process = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-background-networking", "--remote-debugging-pipe", f"--user-data-dir={profile}",
             "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(ours_to_it)
        os.close(ours_from_it)
        self._write, self._read = its_in, its_out
        self._ready = selectors.DefaultSelector()  # epoll: select() refuses a descriptor past 1023
        self._ready.register(self._read, selectors.EVENT_READ)
        self._buffer, self._id, self.events = b"", 0, []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._next()
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _next(self) -> dict:
        while b"\0" not in self._buffer:
            left = self._deadline - time.monotonic()
            if left <= 0 or not self._ready.select(left):
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise EOFError("the browser closed its pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self):
        self._ready.close()
        os.close(self._write)
        os.close(self._read)
        self.process.kill()
        self.process.wait()


def _high(fd: int) -> int:
    """The same pipe end on a descriptor above 4, so that moving the browser's ends to 3 and 4 clobbers none."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


PROBE = """JSON.stringify({
  title: document.title, scripts: document.scripts.length,
  images: [...document.images].map(i => ({natural: [i.naturalWidth, i.naturalHeight], complete: i.complete,
                                          drawn: [i.getBoundingClientRect().width, i.getBoundingClientRect().height]})),
  text: document.body.innerText, height: document.documentElement.scrollHeight,
  width: document.documentElement.scrollWidth})"""


def open_page(page: Path, screenshot: str, timeout: float = 90) -> dict:
    """Load `page` (a local file) in headless Chromium; what it laid out, its errors, and a screenshot.

    Returns {"title", "scripts", "images": [{natural, drawn, complete}], "text", "errors": [...],
    "screenshot": path}; the screenshot (the whole page, PNG) goes to test-artifacts/<screenshot>.
    """
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="pile-browser-") as profile:
        tools = _DevTools(browser, profile, timeout)
        try:
            target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                tools.send(f"{domain}.enable", session=session)
            tools.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1,
                                                              "mobile": False}, session=session)
            tools.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
            tools.wait_for("Page.loadEventFired")
            probe = tools.send("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=session)
            found = json.loads(probe["result"]["value"])
            height = min(int(found["height"]), 30000)
            shot = tools.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                         "clip": {"x": 0, "y": 0, "width": 1280, "height": height,
                                                                  "scale": 1}}, session=session)
        finally:
            tools.close()
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / screenshot
    path.write_bytes(base64.b64decode(shot["data"]))
    found["screenshot"] = str(path)
    found["errors"] = _errors(tools.events)
    return found


def _errors(events: list[dict]) -> list[str]:
    """Console errors and warnings, uncaught exceptions, and the browser's log errors, as lines."""
    out = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            out.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            out.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
    return out
