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

import json
import logging
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus
from typing import Any

from local_server import LocalServer, free_port

__all__ = ["GcsEmulator", "free_port"]  # free_port: from tests/local_server.py

_PROJECT = "emulator-project"


class GcsEmulator(LocalServer):
    """gcp-storage-emulator on 127.0.0.1:`port` with `buckets` created; a context manager."""

    name = "GCS emulator"

    def __init__(self, buckets: tuple[str, ...] = ("bucket",)) -> None:
        super().__init__()
        self.buckets = buckets
        self._credentials = self.workdir / "credentials.json"

    def command(self) -> list[str]:
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
        return [sys.executable, __file__, str(self.port)]

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2).close()
            return True
        except (urllib.error.URLError, OSError):
            return False

    def prepared(self) -> None:
        for name in self.buckets:
            request = urllib.request.Request(
                f"{self.url}/storage/v1/b?project={_PROJECT}",
                data=json.dumps({"name": name}).encode("utf-8"),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()

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
