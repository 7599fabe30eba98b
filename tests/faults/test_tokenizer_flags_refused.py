"""The tokenizer commands' numbers past their range are refused before a sample is drawn: one line naming the flag.

`train-tokenizer`'s trainer flags are SentencePiece's, whose trainer checks its own ranges only
after the sample is drawn (minutes to hours), with an INTERNAL error naming no flag; the seed it
takes is 32-bit unsigned (a larger one was a TypeError after the sample). `tokenizer-report`'s
own numbers: a sample of no text, documents cut to nothing, a seed past 64 bits.
"""

from __future__ import annotations

import pytest

from pipeline.cli import tokenizer_report, train_tokenizer
from pipeline.core.options import UsageError

TRAIN = ["--input", "in/*.jsonl", "--model_prefix", "out/tok"]
REPORT = ["--input", "in/*.jsonl", "--tokenizer_model", "a.model", "--out", "chart.png"]


@pytest.mark.parametrize("flag, value, said", [
    ("--vocab_size", "4", "is below 8"),
    ("--vocab_size", "3000000000", "is above 2147483647: the job's records hold ids as int32"),
    ("--character_coverage", "0.5", "is below 0.98: SentencePiece's trainer takes 0.98 to 1"),
    ("--character_coverage", "1.5", "is above 1: SentencePiece's trainer takes 0.98 to 1"),
    ("--num_threads", "0", "is below 1: SentencePiece's trainer takes 1 to 1024"),
    ("--num_threads", "2000", "is above 1024"),
    ("--max_sentencepiece_length", "600", "is above 512"),
    ("--max_sentence_length", "5", "is below 10: SentencePiece's trainer takes 10 to 1073741824"),
    ("--unk_id", "-1", "is below 0: SentencePiece requires an unknown piece"),
    ("--bos_id", "-2", "is below -1: a token id is >= 0, or -1 for none"),
    ("--pad_id", "3000000000", "is above 2147483647"),
    ("--seed", "-1", "is below 0: SentencePiece's random generator takes a 32-bit unsigned seed"),
    ("--seed", "4294967296", "is above 4294967295"),
    ("--max_doc_chars", "0", "is below 1: a document cut to no characters is empty"),
])
def test_train_tokenizer_refuses_a_number_past_its_range_naming_the_flag(flag, value, said):
    with pytest.raises(UsageError) as refused:
        train_tokenizer.parse_args([*TRAIN, flag, value])
    assert str(refused.value).startswith(f"{flag} {value} {said}") and "\n" not in str(refused.value)


@pytest.mark.parametrize("flag, value, said", [
    ("--sample_mb_per_subset", "0", "must be above 0: a sample holds some text"),
    ("--sample_mb_per_subset", "-2", "must be above 0: a sample holds some text"),
    ("--max_doc_chars", "0", "is below 1: a document cut to no characters is empty"),
    ("--seed", "99999999999999999999", "is above 9223372036854775807: a seed is a 64-bit integer"),
])
def test_tokenizer_report_refuses_a_number_past_its_range_naming_the_flag(flag, value, said):
    with pytest.raises(ValueError, match=f"^{flag} {value} {said}$"):
        tokenizer_report.parse_args([*REPORT, flag, value])


@pytest.mark.parametrize("cli, argv", [(train_tokenizer.cli, [*TRAIN, "--num_threads", "2000"]),
                                       (tokenizer_report.cli, [*REPORT, "--max_doc_chars", "-3"])])
def test_the_commands_exit_2_with_one_line(cli, argv, capsys, caplog):
    assert cli(argv) == 2
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(lines) == 1 and lines[0].startswith(argv[-2] + " " + argv[-1]), lines
