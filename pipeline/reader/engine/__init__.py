"""The readers' framework-free engine: orders, mixtures, the document store, read-time packing (NumPy only).

Nothing here imports TensorFlow or torch (tests/test_layers.py checks it): the tf.data adapters
(pipeline/reader/) and the PyTorch one (pipeline/pytorch.py) both drive these modules.
"""
