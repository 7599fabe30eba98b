#!/usr/bin/env bash
# Set up .venv with what the job and the reader need (the `pipeline`, `reader` and `tokenizers` extras, not the
# development set), run the pipeline on the bundled sample corpus (the Pile's layout, 22 subsets),
# which prints the manifest summary, then read the first batch back through the training reader and
# detokenize it. Output goes to out/sample (replaced on every run).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
EXTRAS=pipeline,reader,tokenizers bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/pile-pipeline run \
  --input 'sample_data/pile/train/*.jsonl.zst' \
  --output_dir out/sample \
  --tokenizer_model tokenizers/sample/sample.model \
  --shard_size_mb 2 \
  --overwrite
.venv/bin/pile-pipeline show out/sample --tokenizer_model tokenizers/sample/sample.model --summary false
