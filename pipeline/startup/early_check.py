"""The backend self-check started in a forked process as a command starts, before it imports Beam.

The check itself is self_check's `choose_backend`, for every kind; this module only runs it early
and hands its result over.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

from pipeline.core import documents
from pipeline.io import inputs
from pipeline.tokenize import encoder
from pipeline.tokenize.engines import FAST_BACKENDS, import_backend, package_version
from pipeline.tokenize.kinds.registry import AUTO, KINDS
from pipeline.tokenize.model import BackendChoice, TokenizerModel, as_model
from pipeline.tokenize.self_check import choose_backend

NICE = 10  # the early check's priority below the driver's


class EarlyChoice:
    """The backend self-check started in a forked process as the command starts, before it imports Beam.

    The driver's own start (Beam's import, its checks) then overlaps the self-check (the driver waits
    for it, then builds the graph). The driver still decides everything itself, in its usual order,
    and takes the result only for exactly what it settled on (`result`): the same request,
    tokenizer, schema and input files; otherwise, or when the early check failed in any way, it
    checks again itself and reports whatever is wrong. Nothing starts for a kind's reference
    engine, or where this process cannot fork safely. `model`: the driver's `TokenizerModel` (or a
    path to read it from), handed to the forked process as it is: the check reads no file the
    driver read already.
    """

    def __init__(self, requested: str, model: TokenizerModel | str, patterns: list[str], schema: documents.Schema):
        model = as_model(model)
        self._asked = (requested, model.path, model.sha256, model.tiktoken_name, schema)
        self._process = self._received = None
        if requested == KINDS[model.kind].reference or not _can_fork():
            return
        context = multiprocessing.get_context("fork")
        self._received, sent = context.Pipe(duplex=False)
        self._process = context.Process(target=_choose_and_send, args=(sent, requested, model, list(patterns),
                                                                        schema), name="pile-self-check", daemon=True)
        self._process.start()
        sent.close()

    def result(self, requested: str, model: TokenizerModel | str, input_files: list[str],
               schema: documents.Schema) -> BackendChoice | None:
        """The early choice when it was made for exactly these arguments, else None."""
        model = as_model(model)
        if self._received is None or self._asked != (requested, model.path, model.sha256, model.tiktoken_name,
                                                     schema):
            self.cancel()
            return None
        # While the check finishes: the modules of the engine it most likely chooses, which this
        # process's workers will need (the check's process was forked before they were loaded).
        likely = [b for b in (KINDS[model.kind].auto if requested == AUTO else (requested,))
                  if b in FAST_BACKENDS and package_version(b)]
        if likely:
            import_backend(likely[0])
        try:
            got = self._received.recv()
        except (EOFError, OSError):
            got = None
        self.cancel()
        if got is None or got[0] != list(input_files):
            return None
        _, choice, derived = got
        encoder.adopt(derived)  # the workers on this machine need not derive it from the tokenizer again
        return choice

    def cancel(self) -> None:
        """Stop the early check (idempotent)."""
        if self._received is not None:
            self._received.close()
            self._received = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.terminate()
            self._process.join()
            self._process = None


def _can_fork() -> bool:
    # A forked child has only the thread that forked: safe while this process runs no other thread and
    # has not loaded a fast tokenizer (its native thread pool would not survive the fork). A command
    # starts the check before Beam, whose gRPC threads come with the pipeline.
    return ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and not any(name in sys.modules for name in ("gigatoken", "kitoken")))


def _choose_and_send(sent, requested: str, model: TokenizerModel, patterns: list[str],
                     schema: documents.Schema) -> None:
    try:
        # Below the driver: on a machine with few cores the check takes what the driver leaves, not the
        # driver's core.
        os.nice(NICE)
        files = inputs.expand_inputs(patterns)
        choice = choose_backend(requested, model.tokenizer, files, schema=schema)
        # What each worker derives from the tokenizer for the chosen engine (its safe cuts among them).
        encoder.Encoder(model.path, choice.name, threads=1).load(model.tokenizer)
        sent.send((files, choice, encoder.derived()))
    except BaseException:  # noqa: BLE001 -- the driver checks again itself and reports what is wrong
        sent.send(None)
