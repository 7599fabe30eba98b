"""A loopback S3 server for the tests: moto's server mode on 127.0.0.1, on a free port.

Commands reach it the way a user reaches MinIO or any S3-compatible store: `AWS_ENDPOINT_URL_S3`
(botocore's standard variable) and the credentials in the environment; there is no test-only hook.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.request
import uuid

import pytest

ACCESS_KEY = "AKIDPIPELINETEST"


@contextlib.contextmanager
def loopback_s3(bucket: str, secret: str | None = None):
    """A server with an empty `bucket`; yields (s3 filesystem, the environment a command needs to reach it).

    This process gets that environment too while the server runs, and nothing else: no profile,
    session token or other endpoint, no profile files, no instance metadata service.
    """
    import fsspec
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets in this process, not in the server: an earlier test's would remain.
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")).close()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": secret or f"secret-{uuid.uuid4().hex}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"):
                mp.delenv(key, raising=False)
            s3fs.S3FileSystem.clear_instance_cache()  # a filesystem made before would miss the endpoint
            fs = fsspec.filesystem("s3")
            fs.mkdir(bucket)
            yield fs, env
            s3fs.S3FileSystem.clear_instance_cache()
    finally:
        server.stop()
