"""Data-parallel training on the pipeline's shards with Horovod or SageMaker's data-parallel library.

    # CPU or GPU machines of your own (Horovod built by scripts/setup_horovod_env.sh):
    .venv-hvd/bin/horovodrun -np 2 -H localhost:2 --gloo \
        python -m trainers.train_horovod --train_data out/train --val_data out/val --max_steps 100

    # SageMaker: trainers/launch_sagemaker.py --trainer horovod|smddp (MPI / smdistributed launch it)

`--backend horovod` (default) uses `horovod.tensorflow` with `dp_rank = hvd.rank()`; `--backend
smddp` uses `smdistributed.dataparallel.tensorflow` (same API shape; only inside SageMaker's
containers); `--backend local` runs one process without either. All three share the data-parallel
trainer, trainers/data_parallel.py (Horovod's six steps, checkpointing); the backends are in
trainers/data_parallel_backends.py.
"""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file (SageMaker's entry_point): make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers.config import add_train_args, config_from_args  # noqa: E402
from trainers.data_parallel import train  # noqa: E402
from trainers.data_parallel_backends import make_backend  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """Flags: the shared training flags plus --backend."""
    p = argparse.ArgumentParser(
        prog="python -m trainers.train_horovod", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", choices=("horovod", "smddp", "local", "auto"),
                   default=os.environ.get("TRAINER_BACKEND", "horovod"),
                   help="data-parallel library (default horovod; auto: smddp inside SageMaker when "
                        "present, else horovod, else local)")
    p.add_argument("--hvd_num_groups", type=int, default=0,
                   help="Horovod: gradient all-reduce groups (0: one per gradient, overlapping the "
                        "backward pass; 1: one grouped op, fastest to trace for small models)")
    return add_train_args(p)


def main(argv=None) -> dict:
    """Parse flags, initialize the backend (Horovod step 1) and train."""
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    backend = make_backend(args.backend, hvd_num_groups=args.hvd_num_groups)
    try:
        return train(cfg, backend)
    finally:
        backend.shutdown()


if __name__ == "__main__":
    main()
