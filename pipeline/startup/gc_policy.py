"""When Python's cyclic garbage collector runs in a command: not while the command starts.

Starting a job makes objects that live as long as the process (Beam's ~2,300 modules, the options,
the job's graph and its translation), and the collector walks them again and again while they are
being made: collections that find nothing to free, in the driver of a DirectRunner job before its
first record (gc.callbacks shows them). A command calls `pause()` as it starts and the job calls `resume()` once
its graph is built: what exists then is frozen (never walked again; it lives until the process
ends anyway) and collection goes on as usual for the job's own objects. Reference counting frees
everything without cycles throughout. Where nothing was paused (a test calling the job in-process),
`resume()` does nothing.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Stop cyclic collection until `resume()` (for the start of a command's process)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what exists and collect again, if `pause()` stopped collection (idempotent)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
