"""Progress of a running job: input bytes done of the total, percent, documents/s, tokens/s, ETA.

A job that does not tokenize (JSON lines without a tokenizer) shows documents alone.

Workers count what they have done (`Reporter`): stored input bytes read and tokenized, documents
kept, tokens. Every count is also a Beam metric (namespace `pile`: `input_bytes_read`,
`input_bytes_tokenized`, the gauge `input_bytes_total`, next to `documents_kept` and `tokens`), so
a distributed runner's own UI (Dataflow's job page, Flink's dashboard) shows the same figures.

On this machine (DirectRunner, or a portable runner whose workers run here) each worker also sends
its cumulative counts, at most once a second, as one small UDP datagram to the driver's `Monitor`
on the loopback interface, signed with the job's key (pipeline/core/reports.py): a datagram from any
other local process, or one out of bounds, is dropped, and at most MAX_SENDERS senders are kept.
Counts are cumulative per sender, so a lost datagram costs nothing; a
retried bundle may count twice, so figures are clamped to the total. The driver knows the total
(the stored size of every input file) and prints a line every `--progress_every` seconds, or keeps
a tqdm bar up to date when stderr is a terminal at least MIN_BAR_COLUMNS wide (a pseudo-terminal
that reports 0 columns, as some job launchers' do, gets the lines). Progress is best effort: a failure to send or
receive never touches the job.

DirectRunner runs one stage at a time: with the fan-out, every chunk is read (the "read" figure)
before any is tokenized; without it, reading and tokenizing go together.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import socket
import sys
import threading
import time
import uuid

from apache_beam.metrics import Metrics

from pipeline.core.reports import new_key, open_report, sign

LOG = logging.getLogger("pipeline.progress")
NAMESPACE = "pile"
SEND_EVERY_S = 1.0
BAR_EVERY_S = 1.0
SAMPLE_EVERY_S = 1.0
RATE_WINDOW_S = 60.0  # rates and the ETA follow the last minute, not the whole run
MIN_BAR_COLUMNS = 40  # narrower (0: a pseudo-terminal that reports no size) and a bar shows nothing useful
FIELDS = ("read", "done", "docs", "tokens")  # stored bytes read, stored bytes tokenized, documents kept, tokens
MAX_SENDERS = 4096  # worker copies of a DoFn: far more than one machine runs


@dataclasses.dataclass(frozen=True)
class Totals:
    """The job's counts so far, summed over workers."""

    read: int = 0
    done: int = 0
    docs: int = 0
    tokens: int = 0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


@dataclasses.dataclass(frozen=True)
class Rates:
    """Recent throughput: stored input bytes, documents and tokens per second."""

    bytes: float
    docs: float
    tokens: float


def progress_line(totals: Totals, total_bytes: int, rates: Rates | None, tokenizes: bool = True) -> str:
    """One plain progress line; `rates`: None until tokenizing has gone on long enough to measure.

    `tokenizes`: false for a job that writes text without a tokenizer (documents, never tokens).

    >>> progress_line(Totals(read=100, done=25, docs=10, tokens=1000), 100, Rates(5.0, 2.0, 200.0))
    'progress: 25.0% of 0.0 MB input tokenized, 2 docs/s, 200 tokens/s, ETA 15s'
    >>> progress_line(Totals(read=100, done=25, docs=10), 100, Rates(5.0, 2.0, 0.0), tokenizes=False)
    'progress: 25.0% of 0.0 MB input processed, 2 docs/s, ETA 15s'
    """
    total = max(total_bytes, 1)
    size = f"{total_bytes / 1e6:.1f} MB"
    if totals.done == 0:
        return f"progress: reading input, {100 * min(totals.read, total) / total:.1f}% of {size} read"
    done = min(totals.done, total)
    verb = "tokenized" if tokenizes else "processed"
    if done >= total:
        if not tokenizes:
            return f"progress: 100% of {size} input processed ({totals.docs:,} documents); writing shards"
        return (f"progress: 100% of {size} input tokenized ({totals.docs:,} documents, {totals.tokens:,} tokens); "
                "shuffling into shards")
    if rates is None or rates.bytes <= 0:
        return f"progress: {100 * done / total:.1f}% of {size} input {verb}, measuring speed"
    return (f"progress: {100 * done / total:.1f}% of {size} input {verb}, {_speed(rates, tokenizes)}, "
            f"ETA {_duration((total - done) / rates.bytes)}")


def _speed(rates: Rates, tokenizes: bool) -> str:
    docs = f"{rates.docs:,.0f} docs/s"
    return f"{docs}, {rates.tokens:,.0f} tokens/s" if tokenizes else docs


class Reporter:
    """Worker side: counts what a DoFn has done, as Beam metrics and (locally) datagrams to the Monitor.

    Picklable until first used (the socket opens lazily), so a DoFn can take one in its constructor.
    `address`: the Monitor's (host, port, key).
    """

    def __init__(self, address: tuple[str, int, bytes] | None = None, total_bytes: int = 0):
        self._address = address
        self._total_bytes = total_bytes
        self._counts = dict.fromkeys(FIELDS, 0)
        self._id: str | None = None  # per unpickled copy: every worker's DoFn is a copy of one object
        self._sock = None
        self._last = 0.0
        self._read = Metrics.counter(NAMESPACE, "input_bytes_read")
        self._done = Metrics.counter(NAMESPACE, "input_bytes_tokenized")
        self._total = Metrics.gauge(NAMESPACE, "input_bytes_total")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_sock"] = None
        state["_id"] = None
        return state

    def add(self, read: int = 0, done: int = 0, docs: int = 0, tokens: int = 0) -> None:
        """Count work done (stored bytes read or tokenized, documents kept, tokens)."""
        self._counts["read"] += read
        self._counts["done"] += done
        self._counts["docs"] += docs
        self._counts["tokens"] += tokens
        if read:
            self._read.inc(read)
        if done:
            self._done.inc(done)
        if time.monotonic() - self._last >= SEND_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Send the counts now (at the end of a bundle, so that the last ones arrive)."""
        self._last = time.monotonic()
        if self._total_bytes:
            self._total.set(self._total_bytes)
        if self._address is None:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._id = uuid.uuid4().hex
            host, port, key = self._address
            self._sock.sendto(sign(key, self._id, self._counts), (host, port))
        except OSError:
            pass  # best effort: progress never fails the job

    def close(self) -> None:
        """Send the last counts and close the socket."""
        self.flush()
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def bar_fits(stream) -> bool:
    """Whether `stream` is a terminal wide enough for a progress bar."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns >= MIN_BAR_COLUMNS
    except (OSError, ValueError, AttributeError):
        return False


class Monitor:
    """Driver side: receives the workers' counts and shows them (see the module docstring).

    Use `start()` ... `stop()`; `address` is what the Reporters send to, with the job's key (None
    when stopped or off).
    """

    def __init__(self, total_bytes: int, every_s: float, stream=None, bar: bool | None = None,
                 tokenizes: bool = True):
        self.total_bytes = total_bytes
        self.tokenizes = tokenizes  # false: a job writing text without a tokenizer shows documents alone
        self._every = every_s
        self._stream = stream if stream is not None else sys.stderr
        self._bar_wanted = bar_fits(self._stream) if bar is None else bar
        self._senders: dict[str, dict] = {}
        self.key = new_key()  # the reports' key: goes to the workers with the job, never on the channel
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._history: collections.deque[tuple[float, Totals]] = collections.deque()  # since tokenizing began
        self.lines: list[str] = []  # every line printed, for the end of the run and for tests

    @property
    def address(self) -> tuple[str, int, bytes] | None:
        """(host, port, key) for the Reporters, or None when not receiving."""
        return (*self._sock.getsockname(), self.key) if self._sock is not None else None

    def start(self) -> Monitor:
        """Listen on a loopback port and start showing progress (nothing when every_s is 0)."""
        if self._every <= 0:
            return self
        try:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sock.bind(("127.0.0.1", 0))
            self._sock.settimeout(0.2)
        except OSError as e:
            LOG.warning("no progress lines: cannot listen on the loopback interface (%s)", e)
            self._sock = None
            return self
        self._thread = threading.Thread(target=self._loop, name="pile-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop receiving and showing (idempotent)."""
        self._stopping.set()
        if self._thread is not None:
            self._wake()
            self._thread.join(timeout=5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _wake(self) -> None:
        # An empty datagram ends the loop's wait at once (it ignores it), rather than at its timeout.
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"", self._sock.getsockname())
        except OSError:
            pass  # the timeout ends the wait anyway

    def totals(self) -> Totals:
        """The counts received so far, summed over senders."""
        with self._lock:
            sums = {f: sum(s.get(f, 0) for s in self._senders.values()) for f in FIELDS}
        return Totals(**sums)

    def receive(self, datagram: bytes) -> None:
        """Take one worker's cumulative counts (a datagram not signed with the key, or out of bounds, is dropped)."""
        report = open_report(self.key, datagram, FIELDS)
        if report is None:
            return
        sender, counts = report
        with self._lock:
            if sender in self._senders or len(self._senders) < MAX_SENDERS:
                self._senders[sender] = counts

    def sample(self, now: float | None = None) -> None:
        """Remember the totals now (once tokenizing has begun), for the rates over the last RATE_WINDOW_S."""
        now = time.monotonic() if now is None else now
        totals = self.totals()
        if not totals.done:
            return
        self._history.append((now, totals))
        while len(self._history) > 2 and self._history[1][0] <= now - RATE_WINDOW_S:
            self._history.popleft()

    def rates(self) -> Rates | None:
        """Throughput between the oldest and newest samples kept (None: not enough to measure yet)."""
        if len(self._history) < 2:
            return None
        (t0, a), (t1, b) = self._history[0], self._history[-1]
        if t1 - t0 < 0.5 or b.done <= a.done:
            return None
        seconds = t1 - t0
        return Rates((b.done - a.done) / seconds, (b.docs - a.docs) / seconds, (b.tokens - a.tokens) / seconds)

    def line(self) -> str:
        """The progress line for now."""
        return progress_line(self.totals(), self.total_bytes, self.rates(), self.tokenizes)

    def _loop(self) -> None:
        bar = self._open_bar()
        next_line = time.monotonic() + self._every
        next_bar = next_sample = time.monotonic() + BAR_EVERY_S
        with contextlib.ExitStack() as stack:
            if bar is not None:
                from tqdm.contrib.logging import logging_redirect_tqdm

                stack.enter_context(logging_redirect_tqdm())  # log lines above the bar, not through it
                stack.callback(bar.close)
            while not self._stopping.is_set():
                try:
                    self.receive(self._sock.recv(65536))
                except (TimeoutError, OSError):
                    pass
                now = time.monotonic()
                if now >= next_sample:
                    self.sample(now)
                    next_sample = now + SAMPLE_EVERY_S
                if bar is not None and now >= next_bar:
                    self._update_bar(bar)
                    next_bar = now + BAR_EVERY_S
                if bar is None and now >= next_line:
                    text = self.line()
                    self.lines.append(text)
                    LOG.info("%s", text)
                    next_line = now + self._every

    def _open_bar(self):
        if not self._bar_wanted:
            return None
        from tqdm import tqdm

        return tqdm(total=self.total_bytes, unit="B", unit_scale=True,
                    desc="tokenized" if self.tokenizes else "processed", file=self._stream,
                    dynamic_ncols=True, leave=False)

    def _update_bar(self, bar) -> None:
        totals, rates = self.totals(), self.rates()
        bar.update(max(0, min(totals.done, self.total_bytes) - bar.n))
        if rates is not None:
            bar.set_postfix_str(_speed(rates, self.tokenizes), refresh=True)
        elif not totals.done and totals.read:
            share = min(totals.read, self.total_bytes) / max(self.total_bytes, 1)
            bar.set_postfix_str(f"reading input: {100 * share:.0f}%", refresh=True)
