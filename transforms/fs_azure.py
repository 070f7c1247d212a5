"""azfs:// (Azure Blob Storage) calls that transforms/fs.py serves itself instead of Beam's
`BlobStorageFileSystem`, through the azure-storage-blob client Beam's `BlobStorageIO` builds
(so the same credentials: Beam's `--azure_connection_string`, else the
`AZURE_STORAGE_CONNECTION_STRING` environment variable, else Beam's Azure credentials).

What Beam 2.77 gets wrong there, and so what is done here:

- `exists`: Beam's raises (`BlobStorageError`, 404) for a blob that does not exist instead of
  returning False (`BlobStorageIO._blob_properties` turns the `ResourceNotFoundError` into an
  error `exists` does not catch);
- `match` of a path without a wildcard: Beam's `FileSystem.match` asks `exists` first, so it
  raises too instead of matching nothing (transforms/fs_match.py matches with `stat` and
  `list_under`);
- `delete` of a blob that is not there: Beam's reports the 404 as a failed delete, where a
  gs:// or s3:// delete of a missing object succeeds;
- `rename`: Beam's copies from `https://<account>.blob.core.windows.net/...` whatever endpoint
  the client was given, and deletes the source without waiting for a copy Azure reports as
  pending. Here the copy's source is the client's own URL of the blob, and the source is
  deleted once the copy has succeeded.

A path is `azfs://<account>/<container>/<blob name>`; the account is the client's (the
connection string's), the segment in the path only names it, as in Beam.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = [
    "SCHEME",
    "AzureClientMissingError",
    "FileInfo",
    "blob_client",
    "client_errors",
    "delete",
    "exists",
    "list_under",
    "rename",
    "split_path",
    "stat",
]

SCHEME = "azfs"
_COPY_WAIT = 600.0  # seconds a pending copy is waited for before the rename fails
FileInfo = tuple[str, int, float]  # path, size, last-modified seconds


class AzureClientMissingError(OSError):
    """azure-storage-blob is not installed: the message says what to install."""


def client_errors() -> tuple[type[Exception], ...]:
    """The Azure client's errors (`AzureError`: any answer or connection failure);
    AzureClientMissingError when the client is not installed."""
    try:
        from azure.core.exceptions import AzureError
        from azure.storage.blob import BlobServiceClient  # noqa: F401
    except ImportError as err:
        raise AzureClientMissingError(
            "azfs:// paths need the Azure client: pip install 'tfrecord-etl[azure]' "
            f"(apache-beam[azure]); {err}"
        ) from err
    return (AzureError,)


def _service(options: PipelineOptions | None) -> Any:
    """The `BlobServiceClient` Beam's `BlobStorageIO` builds from `options` (or from the options
    Beam's filesystems hold when there are none, transforms/fs.py)."""
    client_errors()
    from apache_beam.io.azure.blobstorageio import BlobStorageIO
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if options is None:
        options = BeamFileSystems._pipeline_options or PipelineOptions([])
    return BlobStorageIO(pipeline_options=options).client


def split_path(path: str) -> tuple[str, str, str]:
    """(account, container, blob name) of `azfs://account/container/name`; the name may be
    empty (a whole container). ValueError for a path that is not one."""
    from apache_beam.io.azure.blobstorageio import parse_azfs_path

    return parse_azfs_path(path, blob_optional=True, get_account=True)


def blob_client(path: str, options: PipelineOptions | None = None) -> Any:
    """The `BlobClient` of the blob `path` names."""
    _, container, name = split_path(path)
    return _service(options).get_blob_client(container, name)


def exists(path: str, options: PipelineOptions | None = None) -> bool:
    """Whether a blob of that exact name exists (a name prefix, a "directory", is not one)."""
    return stat(path, options) is not None


def stat(path: str, options: PipelineOptions | None = None) -> tuple[int, float] | None:
    """(size, last-modified seconds) of the blob `path` names, or None when there is none."""
    from azure.core.exceptions import ResourceNotFoundError

    _, container, name = split_path(path)
    if not name:
        return None
    try:
        properties = _service(options).get_blob_client(container, name).get_blob_properties()
    except ResourceNotFoundError:  # no such blob, or no such container
        return None
    return properties.size, properties.last_modified.timestamp()


def list_under(path: str, options: PipelineOptions | None = None) -> Iterator[FileInfo]:
    """(path, size, last-modified seconds) of every blob whose name starts with the name in
    `path`, at any depth, in name order."""
    account, container, prefix = split_path(path)
    client = _service(options).get_container_client(container)
    for blob in client.list_blobs(name_starts_with=prefix or None):
        path = f"{SCHEME}://{account}/{container}/{blob.name}"
        yield path, blob.size, blob.last_modified.timestamp()


def delete(paths: Sequence[str], options: PipelineOptions | None = None) -> None:
    """Delete the blobs `paths` name; one that is not there, or goes meanwhile, is no failure
    (as a gs:// or s3:// delete)."""
    from azure.core.exceptions import ResourceNotFoundError

    service = _service(options)
    for path in paths:
        _, container, name = split_path(path)
        try:
            service.get_blob_client(container, name).delete_blob()
        except ResourceNotFoundError:
            pass


def rename(
    sources: Sequence[str], targets: Sequence[str], options: PipelineOptions | None = None
) -> None:
    """Move each blob: copy it (from the client's URL of the source), wait until the copy has
    succeeded, then delete the source. OSError naming the blob when a copy fails."""
    if len(sources) != len(targets):
        raise ValueError("source_file_names and destination_file_names differ in length")
    service = _service(options)
    for source, target in zip(sources, targets, strict=True):
        _, container, name = split_path(source)
        _, target_container, target_name = split_path(target)
        source_blob = service.get_blob_client(container, name)
        target_blob = service.get_blob_client(target_container, target_name)
        status = target_blob.start_copy_from_url(source_blob.url)["copy_status"]
        deadline = time.monotonic() + _COPY_WAIT
        while status == "pending" and time.monotonic() < deadline:
            time.sleep(0.2)
            status = target_blob.get_blob_properties().copy.status
        if status != "success":
            raise OSError(f"{source}: its copy to {target} ended {status!r}; the source is kept")
        source_blob.delete_blob()
