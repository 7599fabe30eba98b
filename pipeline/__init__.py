"""pile-pipeline: JSON-lines corpora -> packed token shards + manifest, and the tf.data reader for them.

The package is cut into layers (core, format, io, ... cli, and the reader beside them); their order
and what each holds are written once, in docs/development.md ("Layout", "Layers"), which
tests/test_layers.py reads and enforces.

Entry points: `python -m pipeline.run` (= `pile-pipeline run`) and `from pipeline import tfdata`.
"""
