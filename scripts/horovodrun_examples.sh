#!/usr/bin/env bash
# Horovod on machines of your own (for SageMaker use trainers/launch_sagemaker.py).
#
#   bash scripts/horovodrun_examples.sh smoke   # 2 CPU processes here: pipeline on the bundled sample
#                                               # corpus, then 40 steps of the tiny model (a few minutes)
#   bash scripts/horovodrun_examples.sh print   # the command lines for GPU machines
#
# Needs .venv (pipeline) and .venv-hvd (Horovod): bash scripts/setup_env.sh && bash scripts/setup_horovod_env.sh
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
HVD="${HVD_VENV:-$REPO/.venv-hvd}"
OUT="${OUT:-out/hvd-smoke}"

print_examples() {
  cat <<EOF
# GPU machines need a GPU build (.venv-hvd is CPU-only): tensorflow[and-cuda]==2.15.1 and Horovod
# built with HOROVOD_GPU_OPERATIONS=NCCL (see docs/training.md). One machine, 8 GPUs, one process each:
horovodrun -np 8 -H localhost:8 \\
  python -m trainers.train_horovod --train_data /efs/pile/tokens/train --val_data /efs/pile/tokens/val \\
  --output_dir /efs/runs/xl --model xl --mixed_precision --batch_size 4 --max_steps 20000 \\
  --learning_rate 2e-4 --warmup_steps 2000 --log_every 50 --eval_every 1000 --checkpoint_every 1000

# Two machines with 8 GPUs each (data reachable from both, e.g. EFS; rank 0 alone reads and writes
# checkpoints and broadcasts them; passwordless ssh between the machines):
horovodrun -np 16 -H node1:8,node2:8 \\
  python -m trainers.train_horovod --train_data /efs/pile/tokens/train --output_dir /efs/runs/xl \\
  --model xl --mixed_precision --batch_size 4 --max_steps 20000

# Capture a tf.profiler trace of steps 100-104 on rank 0 (TensorBoard's Profile tab):
#   ... --profile_start 100 --profile_steps 5
# Resume after a stop: run the same command again; it continues from the newest checkpoint in
# <output_dir>/checkpoints at the exact data position. --stop_at N ends a run early on purpose.
EOF
}

smoke() {
  [[ -x "$HVD/bin/horovodrun" ]] || { echo "no $HVD: run bash scripts/setup_horovod_env.sh" >&2; exit 1; }
  export TF_CPP_MIN_LOG_LEVEL=2
  for split in train val; do
    if [[ "$split" == train ]]; then input='sample_data/pile/train/*.jsonl.zst'; else input=sample_data/pile/val.jsonl.zst; fi
    .venv/bin/python -m pipeline.run --input "$input" --output_dir "$OUT/data/$split" --split "$split" \
      --tokenizer_model tokenizers/sample/sample.model --seq_len 128 --shard_size_mb 1 \
      --document_boundaries --overwrite
  done
  rm -rf "$OUT/run"
  PYTHONPATH="$REPO" "$HVD/bin/horovodrun" -np 2 -H localhost:2 --gloo \
    "$HVD/bin/python" -m trainers.train_horovod \
    --train_data "$OUT/data/train" --val_data "$OUT/data/val" --output_dir "$OUT/run" \
    --model tiny --batch_size 8 --max_steps 40 --learning_rate 3e-3 --warmup_steps 5 \
    --log_every 5 --eval_every 20 --eval_steps 5 --checkpoint_every 20 --threads 1 --hvd_num_groups 1
  echo "metrics: $OUT/run/metrics.jsonl; TensorBoard: .venv/bin/tensorboard --logdir $OUT/run/tensorboard (pip install tensorboard)"
}

case "${1:-print}" in
  smoke) smoke ;;
  print) print_examples ;;
  *) echo "usage: $0 [smoke|print]" >&2; exit 2 ;;
esac
