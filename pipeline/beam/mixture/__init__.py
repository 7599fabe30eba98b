"""Outputs made of several TFRecord outputs, read as one mixture (OUT/mixture.json).

per_subset.py: one output per subset (--per_subset); split_by.py: one per bucket of a stage's
label (--split_by), its last step in split_outputs.py. Each output is the TFRecord format's
(pipeline/beam/tfrecord/).
"""
