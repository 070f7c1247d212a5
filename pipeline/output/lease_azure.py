"""The output lease's calls on azfs:// (pipeline/output/lease.py): Azure Blob Storage's
conditional writes.

The lease is created with a Put Blob that carries `If-None-Match: *` (Azure answers 409
BlobAlreadyExists when the blob exists) and removed with a Delete Blob that carries
`If-Match: <ETag>` of the version read (412 ConditionNotMet when another run's lease replaced
it), through the azure-storage-blob client Beam's `BlobStorageIO` builds from the job's options
(transforms/fs_azure.py: `--azure_connection_string`, else `AZURE_STORAGE_CONNECTION_STRING`),
so the lease reaches the same account the job writes into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transforms import fs_azure

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["create_azure", "delete_azure", "read_azure"]


def read_azure(path: str, options: PipelineOptions | None) -> tuple[bytes, str] | None:
    """The blob's bytes and its ETag (one Get Blob: both of the same version), or None."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        download = fs_azure.blob_client(path, options).download_blob()
        return download.readall(), download.properties.etag
    except ResourceNotFoundError:
        return None


def delete_azure(path: str, etag: str, options: PipelineOptions | None) -> bool:
    """Delete the blob only if it is still the version `etag` names; True when it did."""
    from azure.core.exceptions import HttpResponseError

    try:
        fs_azure.blob_client(path, options).delete_blob(if_match=etag)
    except HttpResponseError as err:
        if err.status_code in (404, 409, 412):  # gone, or replaced by another run's lease
            return False
        raise
    return True


def create_azure(path: str, data: bytes, options: PipelineOptions | None) -> bool:
    """Create the blob with `If-None-Match: *`; False when it exists (409 BlobAlreadyExists;
    412 ConditionNotMet is taken the same way)."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContentSettings

    try:
        fs_azure.blob_client(path, options).upload_blob(
            data,
            if_none_match="*",
            content_settings=ContentSettings(content_type="application/json"),
        )
    except HttpResponseError as err:
        if err.status_code in (409, 412):
            return False
        raise
    return True
