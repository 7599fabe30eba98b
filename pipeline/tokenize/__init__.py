"""Tokenizers: loading a SentencePiece model, fast engines and their self-check, training, reports."""
