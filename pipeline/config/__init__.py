"""Every command's options, declared once: the job's (`job.py`), the tokenizer commands' (`tokenizer.py`)."""
