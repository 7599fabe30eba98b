"""The per-work-item processing as plain classes, without Beam: policy -> tokenize -> the format's writer -> result."""
