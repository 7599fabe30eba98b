"""The output format, the contract between writer and readers: records, TFRecord framing, the manifest."""
