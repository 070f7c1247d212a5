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

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gcs_emulator import free_port

__all__ = ["S3Emulator"]


class S3Emulator:
    """moto's S3 server on 127.0.0.1:`port` with `buckets` created; a context manager."""

    def __init__(self, buckets: tuple[str, ...] = ("bucket",)) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="s3-emulator-"))
        self.buckets = buckets
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.workdir / "emulator.log"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> S3Emulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, timeout: float = 60.0) -> None:
        for name in ("config", "credentials"):
            (self.workdir / name).write_text("", encoding="utf-8")
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the S3 emulator exited with {self._process.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the S3 emulator did not answer on {self.url} in {timeout} s")
            time.sleep(0.05)
        client = self.client()
        for name in self.buckets:
            client.create_bucket(Bucket=name)

    def _ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
            return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

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

    @contextlib.contextmanager
    def environ(self) -> Iterator[None]:
        """This process's environment set to reach the emulator, restored on exit."""
        saved = {key: os.environ.get(key) for key in self.environment()}
        os.environ.update(self.environment())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def client(self) -> Any:
        """A boto3 S3 client of the emulator (for the tests' own checks)."""
        import boto3

        env = self.environment()
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name in `bucket` under `prefix` (the whole tree, no delimiter)."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def read(self, bucket: str, name: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=name)["Body"].read()
