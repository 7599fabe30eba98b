"""A mixture of real pipeline outputs: the job run once per subset (`--subsets NAME --provenance`),
mixed at train time with the `pile_paper` preset; `pile-pipeline provenance` on the mixture names
each record's source and documents, and re-tokenized they are the tokens the reader gives at that
step, on any number of ranks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sentencepiece as spm
from test_provenance import GLOBAL, MODEL, SEED, _corpus, _run

from pipeline.cli import main as cli_main
from pipeline.cli import provenance as command
from pipeline.core.subsets import PILE_PAPER_EPOCHS

pytestmark = pytest.mark.slow

MIXED = ["Wikipedia (en)", "Github", "ArXiv"]
WINDOW = 32


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture_pipeline")
    paths = _corpus(root)
    manifests = {}
    for name in MIXED:
        out = root / name.split()[0].lower()
        manifests[name] = _run(paths, out, "--provenance", "--subsets", name, "--epochs", "none")
    spec = {"format": "pile-mixture", "format_version": 1, "weights": "pile_paper",
            "sources": [{"manifest": name.split()[0].lower()} for name in MIXED]}
    (root / "mixture.json").write_text(json.dumps(spec))
    return root / "mixture.json", manifests


def test_per_subset_outputs_mix_with_the_papers_epochs(mixture):
    from pipeline import tfdata

    path, manifests = mixture
    mix = tfdata.load_mixture(str(path))
    assert mix.names == tuple(MIXED)
    tokens = {n: manifests[n]["subsets"][n]["tokens"] for n in MIXED}
    assert [s.weight for s in mix.sources] == [tokens[n] * PILE_PAPER_EPOCHS[n] for n in MIXED]


@pytest.mark.parametrize("step,dp_size", [(0, 1), (7, 2), (13, 4)])
def test_provenance_of_a_mixture_step_is_the_steps_tokens(mixture, step, dp_size):
    from pipeline import tfdata

    path, manifests = mixture
    sp = spm.SentencePieceProcessor(model_file=MODEL)
    tok = manifests[MIXED[0]]["tokenizer"]
    parts = [next(iter(tfdata.make_dataset(str(path), global_batch_size=GLOBAL, dp_rank=r, dp_size=dp_size,
                                           seed=SEED, shuffle_buffer=WINDOW, start_step=step, num_steps=1)))
             for r in range(dp_size)]
    labels = np.concatenate([p["labels"].numpy() for p in parts])
    mask = np.concatenate([p["loss_mask"].numpy() for p in parts])
    records = command.mixture_documents(str(path), step, GLOBAL, SEED, shuffle_buffer=WINDOW)
    assert [r.position for r in records] == list(range(GLOBAL))
    for row, record in enumerate(records):
        assert record.source in MIXED
        tokens = []
        for piece in record.pieces:
            assert piece.subset == record.source  # each output holds one subset
            document = [tok["bos_id"]] + sp.encode(piece.text) + [tok["eos_id"]]
            tokens += document[piece.first_token : piece.first_token + piece.tokens]
        assert tokens == labels[row][mask[row] > 0].tolist(), (step, row)


def test_the_command_prints_a_mixture_step(mixture, capsys):
    path, _ = mixture
    assert cli_main.main(["provenance", str(path), "--step", "5", "--global_batch_size", str(GLOBAL), "--seed",
                          str(SEED), "--shuffle_buffer", str(WINDOW)]) == 0
    text = capsys.readouterr().out
    assert sum(text.count(n + " ") for n in MIXED) >= GLOBAL and "tokens " in text
    assert cli_main.main(["provenance", str(path), "--step", "5", "--global_batch_size", str(GLOBAL), "--seed",
                          str(SEED), "--epoch", "1"]) == 2
    assert "--epoch" in capsys.readouterr().err
