"""The tf.data reader: the global order, the shards and their checks, one integrity error, the graph (no Beam)."""
