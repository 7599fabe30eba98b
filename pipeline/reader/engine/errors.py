"""The reader's one exception type for a damaged file, importable without TensorFlow (the PyTorch reader uses it).

pipeline/reader/integrity.py adds what TensorFlow needs (the in-graph message, `shard_errors()`).
"""

from __future__ import annotations

MARKER = "ShardIntegrityError"


class ShardIntegrityError(ValueError):
    """A shard the manifest lists is missing, has the wrong size, content or checksum, or reads short.

    Attributes:
        path: the shard's location, as derived from the manifest.
        problem: what is wrong with it.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{MARKER}: {path}: {problem}")

    def __reduce__(self):
        return type(self), (self.path, self.problem)
