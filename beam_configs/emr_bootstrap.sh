#!/bin/bash
# EMR bootstrap action: a Beam Python SDK worker pool with this package on every node, for
# `--environment_type EXTERNAL --environment_config localhost:50000` (beam_configs/flink.toml and
# spark_emr.toml). The pool runs on the host, so its workers see EFS mounts and use the node's
# instance role for S3; no Docker needed.
#
# Build the wheel once and upload it with this script:
#   pip wheel --no-deps -w dist .  &&  aws s3 cp dist/pile_pipeline-0.1.0-py3-none-any.whl s3://my-bucket/emr/
#   aws s3 cp beam_configs/emr_bootstrap.sh s3://my-bucket/emr/
# and name it when creating the cluster:
#   --bootstrap-actions Path=s3://my-bucket/emr/emr_bootstrap.sh,Args=[s3://my-bucket/emr/pile_pipeline-0.1.0-py3-none-any.whl]
#
# Optional second argument: an EFS file system to mount at /mnt/efs (fs-0123456789abcdef0).
set -euo pipefail
WHEEL=${1:?usage: emr_bootstrap.sh s3://BUCKET/pile_pipeline-VERSION-py3-none-any.whl [fs-EFS_ID] [PORT]}
EFS_ID=${2:-}
PORT=${3:-50000}
VENV=/opt/pile-pipeline

# Python 3.11: the launcher's minor version must match the workers' (Amazon Linux 2023, EMR 7.x).
sudo dnf install -y python3.11 python3.11-pip
sudo python3.11 -m venv "$VENV"
aws s3 cp "$WHEEL" /tmp/
# The `worker` extra: the Beam job's packages, cloud I/O (s3fs) and the fast backends.
sudo "$VENV/bin/pip" install --no-cache-dir "pile-pipeline[worker] @ file:///tmp/$(basename "$WHEEL")"

if [ -n "$EFS_ID" ]; then
  sudo dnf install -y amazon-efs-utils
  sudo mkdir -p /mnt/efs
  # TLS mount through the EFS mount helper; `hard` so that I/O waits out a server hiccup, never fails half-way.
  echo "$EFS_ID:/ /mnt/efs efs _netdev,tls,hard,noresvport 0 0" | sudo tee -a /etc/fstab
  sudo mount /mnt/efs
fi

# Shard writers spool each shard being written (and a local copy of it before an S3 upload) in
# $TMPDIR: put it on the node's large data volume (/mnt on EMR), not the small root volume.
sudo mkdir -p /mnt/tmp/pile-pipeline
sudo chmod 1777 /mnt/tmp/pile-pipeline

# The pool starts SDK workers as `python -c ...`: its PATH must find the venv's python first.
sudo tee /etc/systemd/system/beam-worker-pool.service >/dev/null <<UNIT
[Unit]
Description=Apache Beam Python SDK worker pool (EXTERNAL environment)
After=network-online.target remote-fs.target

[Service]
User=hadoop
Environment=PATH=$VENV/bin:/usr/bin:/bin
Environment=TMPDIR=/mnt/tmp/pile-pipeline
ExecStart=$VENV/bin/python -m apache_beam.runners.worker.worker_pool_main --service_port=$PORT
Restart=always

[Install]
WantedBy=multi-user.target
UNIT
sudo systemctl daemon-reload
sudo systemctl enable --now beam-worker-pool
