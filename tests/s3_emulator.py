"""An S3 emulator on 127.0.0.1 for the object-store tests: moto's server (`moto.server`, the
S3 REST API in memory) in its own process, in its own process group, so a test that fails
still stops it.

Conditional writes: moto's S3 answers 412 PreconditionFailed to a PutObject with
`If-None-Match: *` when the key exists and to a DeleteObject whose `If-Match` is not the
object's ETag (tests/test_s3.py::test_the_emulator_honours_the_conditional_writes). This helper
adds nothing to it.

`S3Emulator.environment()` is what a client process needs to reach it through boto3 (Beam's
S3 filesystem, `apache_beam.io.aws`) and nothing else: `AWS_ENDPOINT_URL` (boto3 sends every
request there), fixed keys and a region, and no shared config or credentials file of the
machine's user (`AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE` point at empty files).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from typing import Any

from local_server import LocalServer

__all__ = ["S3Emulator"]


class S3Emulator(LocalServer):
    """moto's S3 server on 127.0.0.1:`port` with `buckets` created; a context manager."""

    name = "S3 emulator"

    def __init__(self, buckets: tuple[str, ...] = ("bucket",)) -> None:
        super().__init__()
        self.buckets = buckets
        self._client: Any = None

    def command(self) -> list[str]:
        for name in ("config", "credentials"):
            (self.workdir / name).write_text("", encoding="utf-8")
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
            return True
        except (urllib.error.URLError, OSError):
            return False

    def prepared(self) -> None:
        client = self.client()
        for name in self.buckets:
            client.create_bucket(Bucket=name)

    def environment(self) -> dict[str, str]:
        """The variables a process needs to use the emulator (see the module docstring)."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "emulator",
            "AWS_SECRET_ACCESS_KEY": "emulator",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(self.workdir / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.workdir / "credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        """The boto3 S3 client of the emulator (for the tests' own checks): one, made when
        first asked for (making one takes about 0.25 s, which a test polling the bucket for
        a running job's objects cannot wait between two looks)."""
        if self._client is None:
            import boto3

            env = self.environment()
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.url,
                aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                region_name=env["AWS_DEFAULT_REGION"],
            )
        return self._client

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name in `bucket` under `prefix` (the whole tree, no delimiter)."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def read(self, bucket: str, name: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=name)["Body"].read()
