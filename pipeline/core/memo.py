"""Values computed once per process and key, which threads share and another process can hand over.

DirectRunner's worker threads each set up a tokenizer from the same model: what is derived from the
model alone (its facts, a converted form, which cuts keep the ids) is computed by the first of them
while the others wait, not by all of them at once; `items` and `adopt` carry what one process has
computed to another (the self-check's process to the driver).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class ProcessMemo:
    """The last `size` values by key; `get` computes a missing one under a lock (others wait for it)."""

    def __init__(self, size: int = 4):
        self._size = size
        self._values: dict = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], object]):
        """The value for `key`, computed once."""
        with self._lock:
            if key not in self._values:
                value = compute()
                if len(self._values) >= self._size:
                    self._values.clear()
                self._values[key] = value
            return self._values[key]

    def items(self) -> dict:
        """Every value kept, by key (to hand to another process)."""
        with self._lock:
            return dict(self._values)

    def adopt(self, items: dict) -> None:
        """Keep values computed elsewhere as this process's own."""
        with self._lock:
            self._values.update(items)
