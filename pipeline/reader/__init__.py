"""The readers: the tf.data adapters here, over the framework-free engine in `engine/` (no Beam).

`engine/` is NumPy only (no TensorFlow, no torch): the global orders, mixtures, the document
store and its read-time packing, the arguments' checks. The modules beside it turn the engine into
tf.data datasets (`dataset.py`, `doc_dataset.py`, `mixture_dataset.py`, `graph.py`, `shards.py`,
`integrity.py`); pipeline/pytorch.py turns it into a torch dataset. The public entry points stay
`from pipeline import tfdata` and `pipeline.pytorch`.
"""
