"""An Azure Blob Storage emulator on 127.0.0.1 for the object-store tests: azurite's blob
service (npm, `azurite-blob`), objects in memory, in its own process group in a temp folder, so
a test that fails still stops it.

azurite is found at `.ci/azurite/node_modules/.bin/azurite-blob` (what `.ci/run` installs with
`npm ci --prefix .ci/azurite`, the version its package-lock.json pins) or on PATH; `installed()`
says why not when neither is there (the tests then skip), or when there is no `node` to run it.

It serves azurite's well-known development account, `devstoreaccount1` and its published key,
at `http://127.0.0.1:<port>/devstoreaccount1`: paths are `azfs://devstoreaccount1/<container>/
<name>`. `AzureEmulator.environment()` is what a client process needs to reach it through
Beam's Azure filesystem and the azure-storage-blob client: `AZURE_STORAGE_CONNECTION_STRING`
(Beam's `BlobStorageIO` reads it when no `--azure_connection_string` is given).

Conditional writes: azurite answers 409 BlobAlreadyExists to a Put Blob with `If-None-Match: *`
when the blob exists and 412 ConditionNotMet to a Put or Delete Blob whose `If-Match` is not the
blob's ETag (tests/test_azure.py::test_the_emulator_honours_the_conditional_writes). This
helper adds nothing to it.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from local_server import LocalServer

__all__ = ["ACCOUNT", "AzureEmulator", "azurite", "installed"]

REPO = Path(__file__).resolve().parent.parent
ACCOUNT = "devstoreaccount1"
# azurite's published development key (the same in every azurite; it guards nothing)
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite() -> str | None:
    """The `azurite-blob` executable: the one .ci/run installs, else one on PATH."""
    pinned = REPO / ".ci" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    return shutil.which("azurite-blob")


def installed() -> str | None:
    """Why azurite cannot be started here (None: it can)."""
    if azurite() is None:
        return "azurite is not installed (npm ci --prefix .ci/azurite, as .ci/run does)"
    if shutil.which("node") is None:
        return "node is not installed (azurite runs on it)"
    return None


class AzureEmulator(LocalServer):
    """azurite's blob service on 127.0.0.1:`port` with `containers` created; a context
    manager."""

    name = "Azure emulator"

    def __init__(self, containers: tuple[str, ...] = ("bucket",)) -> None:
        super().__init__()
        self.containers = containers
        self.connection_string = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.url}/{ACCOUNT};"
        )

    def command(self) -> list[str]:
        found = azurite()
        if found is None:
            raise RuntimeError(installed())
        return [
            found,
            "--blobHost", "127.0.0.1",
            "--blobPort", str(self.port),
            "--inMemoryPersistence",  # nothing written to disk
            "--disableTelemetry",  # nothing sent anywhere
            "--skipApiVersionCheck",  # the client may speak a newer API version than azurite
            "--silent",
        ]  # fmt: skip

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/{ACCOUNT}?comp=list", timeout=2).close()
        except urllib.error.HTTPError:  # an answer (unsigned requests are refused): it listens
            return True
        except (urllib.error.URLError, OSError):
            return False
        return True

    def prepared(self) -> None:
        service = self.service()
        for name in self.containers:
            service.create_container(name)

    def environment(self) -> dict[str, str]:
        """The variables a process needs to use the emulator (see the module docstring)."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def service(self) -> Any:
        """A `BlobServiceClient` of the emulator (for the tests' own checks)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every blob name in the container `bucket` under `prefix` (the whole tree)."""
        client = self.service().get_container_client(bucket)
        return sorted(blob.name for blob in client.list_blobs(name_starts_with=prefix or None))

    def read(self, bucket: str, name: str) -> bytes:
        return self.service().get_blob_client(bucket, name).download_blob().readall()
