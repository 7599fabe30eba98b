"""Fixtures of the fault suite: a loopback S3 server."""

from __future__ import annotations

import uuid

import pytest
from s3_server import loopback_s3


@pytest.fixture(scope="module")
def s3():
    """A loopback S3 server with an empty bucket; yields (filesystem, the command's environment, bucket)."""
    bucket = f"faults-{uuid.uuid4().hex[:8]}"
    with loopback_s3(bucket) as (fs, env):
        yield fs, env, bucket
