"""Tokenizer files of every kind the job takes (SentencePiece, Hugging Face, tiktoken), behind one interface."""
