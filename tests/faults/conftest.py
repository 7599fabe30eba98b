"""Fixtures of the fault suite: a loopback S3 server."""

from __future__ import annotations

import logging
import os
import uuid

import fsspec
import pytest
import s3fs


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A loopback S3 server with an empty bucket; yields (filesystem, the command's environment, bucket)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "AKIDFAULTSUITE",
        "AWS_SECRET_ACCESS_KEY": f"secret-{uuid.uuid4().hex}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"):
            mp.delenv(key, raising=False)
        s3fs.S3FileSystem.clear_instance_cache()
        fs = fsspec.filesystem("s3")
        bucket = f"faults-{uuid.uuid4().hex[:8]}"
        fs.mkdir(bucket)
        yield fs, env, bucket
        s3fs.S3FileSystem.clear_instance_cache()
    server.stop()
