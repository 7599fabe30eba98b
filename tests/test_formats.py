"""The job's output formats: each choice of `--output_format` has its row in `pipeline/beam/job.py`'s table."""

import inspect

from pipeline.beam.job import FORMATS
from pipeline.config.job import OUTPUT_FORMATS


def test_every_output_format_choice_has_a_writer_and_a_summary():
    assert sorted(FORMATS) == sorted(OUTPUT_FORMATS)
    for name, fmt in FORMATS.items():
        assert list(inspect.signature(fmt.build).parameters) == ["p", "job", "chunks", "read_stats", "workspace"], name
        assert list(inspect.signature(fmt.summary).parameters) == ["config", "seconds"], name
