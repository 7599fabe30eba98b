"""The tf.data reader: the epoch plan, the shards and their integrity, the dataset graph (no Beam)."""
