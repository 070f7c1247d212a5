"""A Google Cloud Storage emulator on 127.0.0.1 for the object-store tests.

The emulator is gcp-storage-emulator (pure Python, objects in memory, the JSON API including
the batch endpoint that Beam's gcsio uses to copy and delete). It runs in its own process
(`python tests/gcs_emulator.py PORT`), in its own process group, so a test that fails
still stops it, and so it takes no time from the test process's own threads.

Preconditions: gcp-storage-emulator ignores `ifGenerationMatch`. GCS answers 412 when the
object's generation is not the one given (0: the object must not exist), on an upload and on a
delete; the output lease relies on exactly that. `_honour_preconditions` adds that rule to the
emulator's upload (media and multipart) and delete handlers, so the lease's calls go through
the real google-cloud-storage client and get GCS's answers. It is this helper that enforces
them, not the emulator: what GCS does is its documented behaviour, not something these tests
prove.

`GcsEmulator.environment()` is what a client process needs to reach the emulator through Beam's
gcsio (google-cloud-storage) and nothing else:

- `STORAGE_EMULATOR_HOST`: google-cloud-storage sends every request there;
- `GOOGLE_APPLICATION_CREDENTIALS`: a credentials file holding a fixed access token that never
  expires. Beam's gcsio asks google-auth for default credentials first; with none it retries up to
  about 30 s (and probes the GCE metadata server). With this file it has credentials at once and
  never refreshes them; the emulator ignores the token;
- `GCE_METADATA_HOST` / `GCE_METADATA_IP` / `NO_GCE_CHECK`: a metadata lookup, if any is left,
  goes to a closed port on 127.0.0.1 (and TensorFlow skips its GCE check): no request leaves
  this host;
- `GOOGLE_CLOUD_PROJECT`: a project id, so google-auth does not look one up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

__all__ = ["GcsEmulator", "free_port"]

_PROJECT = "emulator-project"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """gcp-storage-emulator on 127.0.0.1:`port` with `buckets` created; a context manager."""

    def __init__(self, buckets: tuple[str, ...] = ("bucket",)) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="gcs-emulator-"))
        self.buckets = buckets
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None
        self.log = self.workdir / "emulator.log"
        self._credentials = self.workdir / "credentials.json"

    def __enter__(self) -> GcsEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, timeout: float = 30.0) -> None:
        self._credentials.write_text(
            json.dumps(
                {
                    "type": "authorized_user",
                    "client_id": "emulator",
                    "client_secret": "emulator",
                    "refresh_token": "emulator",
                    "token": "emulator",
                    "expiry": "2999-01-01T00:00:00Z",
                }
            ),
            encoding="utf-8",
        )
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, __file__, str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the GCS emulator exited with {self._process.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the GCS emulator did not answer on {self.url} in {timeout} s")
            time.sleep(0.05)
        for name in self.buckets:
            request = urllib.request.Request(
                f"{self.url}/storage/v1/b?project={_PROJECT}",
                data=json.dumps({"name": name}).encode("utf-8"),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()

    def _ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2).close()
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
        closed = f"127.0.0.1:{free_port()}"
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "GOOGLE_APPLICATION_CREDENTIALS": str(self._credentials),
            "GOOGLE_CLOUD_PROJECT": _PROJECT,
            "GCE_METADATA_HOST": closed,
            "GCE_METADATA_IP": closed,
            "NO_GCE_CHECK": "True",
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

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name in `bucket` under `prefix` (the whole tree, no delimiter)."""
        query = urllib.parse.urlencode({"prefix": prefix})
        with urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o?{query}", timeout=10) as r:
            page = json.loads(r.read().decode("utf-8"))
        return sorted(item["name"] for item in page.get("items") or [])

    def read(self, bucket: str, name: str) -> bytes:
        quoted = urllib.parse.quote(name, safe="")
        url = f"{self.url}/download/storage/v1/b/{bucket}/o/{quoted}?alt=media"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()


# ----------------------------------------------------------------------------- the server process


def _generation(storage: Any, bucket: str, name: str | None) -> int:
    """The object's generation, 0 when there is none (GCS's meaning of ifGenerationMatch=0)."""
    from gcp_storage_emulator.exceptions import NotFound

    if not name:
        return 0
    try:
        return int(storage.get_file_obj(bucket, name)["generation"])
    except NotFound:
        return 0


def _upload_name(request: Any) -> str | None:
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data
    return data.get("meta", {}).get("name") if isinstance(data, dict) else None


def _precondition(handler: Any, name_of: Any) -> Any:
    def checked(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        wanted = request.query.get("ifGenerationMatch")
        if wanted is not None:
            bucket = request.params["bucket_name"]
            if _generation(storage, bucket, name_of(request)) != int(wanted[0]):
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                return None
        return handler(request, response, storage, *args, **kwargs)

    return checked


def _honour_preconditions() -> None:
    """ifGenerationMatch on uploads (media, multipart) and deletes, as GCS answers it."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects

    wrapped = {
        objects.insert: _precondition(objects.insert, _upload_name),
        objects.delete: _precondition(objects.delete, lambda r: r.params["object_id"]),
    }
    for _, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler in wrapped:
                handlers[method] = wrapped[handler]


def _no_metadata_snapshots() -> None:
    """No snapshot of every object's metadata after each write: uploads in constant time.

    After each upload, delete and patch, the emulator's `Storage` serializes the metadata of
    every object it holds (indented JSON, to `.meta` in its store) so that a file-backed emulator
    finds it again at its next start. In memory that snapshot is never read back (the store is
    read once, when it is made, empty), yet each write pays for it: N uploads cost O(N^2), and
    thousands of objects took minutes (bench/plan_files_gcs.py). This server keeps its objects in
    memory, so the snapshot is skipped; a file-backed store would still write it.
    """
    from gcp_storage_emulator.storage import Storage

    snapshot = Storage._write_config_to_file

    def write_config(self: Any) -> None:
        if not self._use_memory_fs:
            snapshot(self)

    Storage._write_config_to_file = write_config


def _serve(port: int) -> None:
    from gcp_storage_emulator.server import create_server

    logging.basicConfig(level=logging.ERROR)
    _honour_preconditions()
    _no_metadata_snapshots()
    server = create_server("127.0.0.1", port, in_memory=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.run()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
