"""`--output_format tfrecord`: the graph and manifest (output.py), packing (pack.py), shards (shards.py)."""
