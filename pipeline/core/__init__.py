"""Pure algorithms and rules: no Beam, no TensorFlow, no I/O beyond what a caller passes in."""
