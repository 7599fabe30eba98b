"""Bytes in and out: reading inputs, publishing files atomically, spill files, locations."""
