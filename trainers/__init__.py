"""Trainers for the shards the pipeline writes: a decoder-only LM, Horovod / SageMaker trainers, a launcher.

Everything here imports without Apache Beam and runs on TensorFlow 2.15 (Keras 2, where Horovod
0.28.1 builds) as well as 2.21 (Keras 3). `smdistributed` (SageMaker's data- and model-parallel
libraries) exists only inside SageMaker's training containers; the scripts that need it import it
lazily and fail with a clear message elsewhere.
"""
