"""A store reader's state read back from a checkpoint: every field checked, and the whole sealed.

A state (`store_state`, `StoreDataset.state_dict`) is saved beside a checkpoint and read back on a
resume, so it is untrusted input: a field edited by hand, cut or of another type would otherwise
resume on other batches, repeat tokens or end the run without a batch. So, before anything is
read:

1. **Fields.** Each field is type- and range-checked against the reader and its store, the error
   (`StoreStateError`) naming the field: the step and window start (integers, the window the
   step's), the schedule (entries as a schedule's), the cursor's keys and values: a position inside
   the epoch's order, an offset inside that document, an epoch from the run's first on, a packing
   window of the epoch, a concat label count equal to the labels of the steps before the window
   (pipeline/reader/engine/doc_stream.py and doc_plan.py make these checks).
2. **Seal.** `check`: a digest of every other field, made when the state is made. A field changed
   into another value that passes its own checks (a position of another document of the right
   length, a best_fit chain entry) changes the digest: refused. The digest is not a secret: it
   finds edits and damage, not a forger.
"""

from __future__ import annotations

import hashlib
import json

from pipeline.reader.engine.request import integer

SEAL = "check"


class StoreStateError(ValueError):
    """A state that does not belong to this reader, a field out of range, or a schedule that contradicts it."""


def _digest(state: dict) -> str:
    body = {k: v for k, v in state.items() if k != SEAL}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def seal(state: dict) -> dict:
    """The state with its `check` field: a digest of the others."""
    return {**state, SEAL: _digest(state)}


def check_seal(state: dict) -> None:
    """Refuse a state whose `check` field is missing or does not match its other fields."""
    given = state.get(SEAL)
    if not isinstance(given, str):
        raise StoreStateError(f"state: no '{SEAL}' field (a state is saved as store_state() or state_dict() "
                              "return it, unchanged)")
    try:
        digest = _digest(state)
    except (TypeError, ValueError) as e:
        raise StoreStateError(f"state: not JSON data ({e})") from None
    if given != digest:
        raise StoreStateError(f"state: its '{SEAL}' does not match its fields: edited or damaged since it was "
                              "saved; resume from the state as saved (or from store_state() at its step)")


def field(state, name: str, where: str = "state"):
    """`state[name]`, or a StoreStateError naming the missing field."""
    if not isinstance(state, dict):
        raise StoreStateError(f"{where}: {type(state).__name__}, not a dict")
    if name not in state:
        raise StoreStateError(f"{where}: no field '{name}'")
    return state[name]


def int_field(state, name: str, lo: int, hi: int, where: str = "state") -> int:
    """`state[name]` as an int within [lo, hi], or a StoreStateError naming `where.name`."""
    label = name if where == "state" else f"{where}.{name}"
    return integer(f"state field {label}", field(state, name, where), lo, hi, error=StoreStateError)


def exact_keys(value, keys: tuple[str, ...], where: str) -> dict:
    """`value` as a dict holding exactly `keys`, or a StoreStateError naming the extra or missing ones."""
    if not isinstance(value, dict):
        raise StoreStateError(f"state field {where}: {value!r} is not a dict")
    missing = [k for k in keys if k not in value]
    extra = sorted(map(str, set(value) - set(keys)))
    if missing or extra:
        raise StoreStateError(f"state field {where}: " + "; ".join(
            ([f"no {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])))
    return value
