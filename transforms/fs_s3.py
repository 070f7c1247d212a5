"""One boto3 client per S3 setting, shared by every call Beam's S3 filesystem makes in a process.

Beam 2.77's S3 filesystem builds a new boto3 session and client for every call
(`apache_beam.io.aws.s3io.S3IO` -> `boto3_client.Client`): a `match`, an `exists`, a `delete`,
each upload and read. A new session loads botocore's endpoint and service-model files again,
about 0.25 s a client on the 2-core machine this was measured on; under cProfile, one test's
four `convert` runs of the sample on S3 made 233 clients, 59 s of the test's 81 s. boto3's
clients are safe to share between threads (its sessions are not), so `share_s3_clients` has
Beam's module build each client once per setting: the keyword arguments Beam passes (endpoint,
region, credentials from the pipeline options, ...) and the `AWS_*` environment variables boto3
reads besides them. What each call does is unchanged; only its client is reused.
`S3_CLIENTS=per-call` in the environment keeps Beam's own behaviour (bench/s3_clients.py
measures one against the other).
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["share_s3_clients"]

_lock = threading.Lock()
_clients: dict[tuple, Any] = {}


class _Session:
    """What Beam's module gets for `boto3.session.Session()`: its `client` is shared."""

    def client(self, **kwargs: Any) -> Any:
        import boto3

        environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (tuple(sorted(kwargs.items(), key=lambda item: item[0])), environment)
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = boto3.session.Session().client(**kwargs)
                _clients[key] = client
        return client


class _SessionModule:
    Session = _Session


class _Boto3:
    """The `boto3` Beam's S3 client module sees: `boto3.session.Session` only."""

    session = _SessionModule


def share_s3_clients() -> None:
    """Have Beam's S3 filesystem reuse its boto3 clients (see the module docstring); nothing
    when Beam's AWS support (boto3) is not installed. Called once Beam's filesystems are used."""
    if os.environ.get("S3_CLIENTS") == "per-call":
        return
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    if boto3_client.boto3 is not None and boto3_client.boto3 is not _Boto3:
        boto3_client.boto3 = _Boto3
