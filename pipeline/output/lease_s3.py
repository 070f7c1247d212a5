"""The output lease's calls on s3:// (pipeline/output/lease.py): S3's conditional writes.

The lease is created with a PutObject that carries `If-None-Match: *` (S3 answers 412 when the
key exists) and removed with a DeleteObject that carries `If-Match: <ETag>` of the version read
(412 when another run's lease replaced it), through the boto3 client Beam's S3 filesystem
builds from the job's options (`--s3_endpoint_url`, `--s3_region_name`, ...; boto3's own
environment and config files when there are none), so the lease reaches the same store the job
writes into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["create_s3", "delete_s3", "read_s3"]


def _s3_object(path: str, options: PipelineOptions | None) -> tuple[Any, str, str]:
    """(boto3 client, bucket, key): the client Beam's S3 filesystem builds from `options`, or
    from the options Beam's filesystems hold when there are none (transforms/fs.py)."""
    from apache_beam.io.aws.clients.s3.boto3_client import Client
    from apache_beam.io.aws.s3io import parse_s3_path
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if options is None:
        options = BeamFileSystems._pipeline_options or PipelineOptions([])
    bucket, key = parse_s3_path(path)
    return Client(options=options).client, bucket, key


def _s3_status(err: Exception) -> int | None:
    """The HTTP status of a boto3 ClientError (None for any other error)."""
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def read_s3(path: str, options: PipelineOptions | None) -> tuple[bytes, str] | None:
    """The object's bytes and its ETag (one GetObject: both of the same version), or None."""
    from botocore.exceptions import ClientError

    client, bucket, key = _s3_object(path, options)
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if _s3_status(err) == 404:
            return None
        raise
    return answer["Body"].read(), answer["ETag"]


def delete_s3(path: str, etag: str, options: PipelineOptions | None) -> bool:
    """Delete the object only if it is still the version `etag` names; True when it did."""
    from botocore.exceptions import ClientError

    client, bucket, key = _s3_object(path, options)
    try:
        client.delete_object(Bucket=bucket, Key=key, IfMatch=etag)
    except ClientError as err:
        if _s3_status(err) in (404, 409, 412):  # gone, or replaced by another run's lease
            return False
        raise
    return True


def create_s3(path: str, data: bytes, options: PipelineOptions | None) -> bool:
    """Create the object with `If-None-Match: *`; False when it exists (412), or when another
    conditional write to the same key is in flight (409, which S3 answers to the loser)."""
    from botocore.exceptions import ClientError

    client, bucket, key = _s3_object(path, options)
    try:
        client.put_object(
            Bucket=bucket, Key=key, Body=data, ContentType="application/json", IfNoneMatch="*"
        )
    except ClientError as err:
        if _s3_status(err) in (409, 412):
            return False
        raise
    return True
