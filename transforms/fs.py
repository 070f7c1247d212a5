"""Files by path without importing Beam for a local one: `FileSystems` and `CompressionTypes`
with the interface of Beam's (`apache_beam.io.filesystems`), for the methods this project uses.

A path with a scheme (`gs://...`, any `scheme://`) goes to Beam's `FileSystems`, imported on
first use, except what Beam 2.77's Azure filesystem gets wrong: `exists`, `match`, `delete` and
`rename` of `azfs://` paths go through the Azure client (transforms/fs_azure.py).

A path without one is what Beam's `LocalFileSystem` would serve, and is served here by the
standard library with that class's semantics: `create` makes the parent directories, `delete`
removes files or whole directories and raises an `OSError` (as Beam's `BeamIOError`, an
`IOError`) when a path matches nothing, `match` lists a directory tree with Beam's pattern
translation (`*` stops at `/`, `**` does not, `?`, `[...]`, hidden files included, a pattern
without a wildcard names one path; transforms/fs_match.py). A local file that is read or
written compressed (an explicit compression, or, with `AUTO`, a suffix Beam detects such as
`.gz`) also goes to Beam, so that the (de)compression stays Beam's own; any other local file is
a plain `open`.

Importing Beam costs a second or more, which a command or a small local job that never needs
it does not pay (docs/cli.md).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from typing import IO, Any

from transforms.fs_match import FileSystemError, match_azure, match_local
from transforms.fs_s3 import share_s3_clients

__all__ = [
    "CompressionTypes",
    "FileSystems",
    "exists",
    "is_local",
    "join",
    "match",
    "open_read",
    "set_beam_options",
]

_OCTET_STREAM = "application/octet-stream"


class CompressionTypes:
    """Beam's compression names (the same strings, so either class's values go to either)."""

    AUTO = "auto"
    BZIP2 = "bzip2"
    DEFLATE = "deflate"
    ZSTD = "zstd"
    GZIP = "gzip"
    LZMA = "lzma"
    UNCOMPRESSED = "uncompressed"

    _BY_SUFFIX = {
        ".bz2": BZIP2,
        ".deflate": DEFLATE,
        ".gz": GZIP,
        ".zst": ZSTD,
        ".zstd": ZSTD,
        ".xz": LZMA,
        ".lzma": LZMA,
    }

    @classmethod
    def detect_compression_type(cls, file_path: str) -> str:
        """The compression Beam infers from the path's suffix (case-insensitive)."""
        lowered = file_path.lower()
        for suffix, compression in cls._BY_SUFFIX.items():
            if lowered.endswith(suffix):
                return compression
        return cls.UNCOMPRESSED


def _beam() -> Any:
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems

    if BeamFileSystems._pipeline_options is None:  # no pipeline built in this process yet
        set_beam_options([])
    else:
        share_s3_clients()
    return BeamFileSystems


def set_beam_options(args: Sequence[str]) -> None:
    """Give Beam's filesystems the pipeline options in `args` (`--s3_endpoint_url=...`,
    `--azure_connection_string=...`): what a pipeline does when it is built, done here for the
    work before one (planning, the lease, clearing an output) and for commands that build none.

    Beam's S3 filesystem refuses to work without options; with none given (`[]`), boto3 finds
    its endpoint, region and credentials itself (`AWS_*` variables, `~/.aws/config`)."""
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    share_s3_clients()  # Beam builds a boto3 client per call otherwise (0.25 s each)
    BeamFileSystems.set_options(PipelineOptions(list(args)))


def _delete_local(paths: Sequence[str]) -> None:
    failed: dict[str, Exception] = {}
    for result in FileSystems.match(list(paths)):
        if not result.metadata_list:
            failed[result.pattern] = OSError(f"No files found to delete under: {result.pattern}")
        for meta in result.metadata_list:
            try:
                if os.path.isdir(meta.path):
                    shutil.rmtree(meta.path)
                else:
                    os.remove(meta.path)
            except Exception as err:
                failed[meta.path] = OSError(err)
    if failed:
        raise FileSystemError("Delete operation failed", failed)


def _is_azure(path: str) -> bool:
    return FileSystems.get_scheme(path) == "azfs"


def _azure_client_missing() -> type[OSError]:
    from transforms.fs_azure import AzureClientMissingError

    return AzureClientMissingError


def _delete_azure(paths: Sequence[str]) -> None:
    """Beam's delete on azfs://: a path ending in `/` deletes every blob under it, a pattern
    the blobs it matches, a name that blob; what is not there is no failure (as on gs://)."""
    from transforms import fs_azure

    names: list[str] = []
    for path in paths:
        if path.endswith("/"):
            names.extend(found for found, _, _ in fs_azure.list_under(path))
        elif re.search(r"[\[*?]", path):
            names.extend(m.path for m in match_azure(path, None).metadata_list)
        else:
            names.append(path)
    fs_azure.delete(names)


def _plain(path: str, compression_type: str) -> bool:
    """Whether a local file is read or written as it is (no compression)."""
    if compression_type == CompressionTypes.AUTO:
        compression_type = CompressionTypes.detect_compression_type(path)
    return compression_type == CompressionTypes.UNCOMPRESSED


class FileSystems:
    """Beam's `FileSystems` for the methods this project uses; a local path is served without
    Beam (see the module's docstring), any other by Beam's own class."""

    URI_SCHEMA_PATTERN = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")

    @staticmethod
    def get_scheme(path: str) -> str | None:
        """The path's scheme (`gs`), or None for a local path."""
        found = FileSystems.URI_SCHEMA_PATTERN.match(path.strip())
        return None if found is None else found.group("scheme")

    @staticmethod
    def join(basepath: str, *paths: str) -> str:
        if is_local(basepath):
            return os.path.join(basepath, *paths)
        return _beam().join(basepath, *paths)

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        """(head, last component); a local head is absolute, as Beam's."""
        if is_local(path):
            return os.path.split(os.path.abspath(path))
        return _beam().split(path)

    @staticmethod
    def mkdirs(path: str) -> None:
        """Make the directory and its parents; OSError when it is there already."""
        if not is_local(path):
            return _beam().mkdirs(path)
        try:
            os.makedirs(path)
        except OSError as err:
            raise OSError(err) from err
        return None

    @staticmethod
    def exists(path: str) -> bool:
        if is_local(path):
            return os.path.exists(path)
        if _is_azure(path):
            from transforms import fs_azure

            return fs_azure.exists(path)
        return _beam().exists(path)

    @staticmethod
    def open(
        path: str,
        mime_type: str = _OCTET_STREAM,
        compression_type: str = CompressionTypes.AUTO,
    ) -> IO[bytes]:
        """A read channel; decompressed as `compression_type` says (AUTO: by the suffix)."""
        if is_local(path) and _plain(path, compression_type):
            return open(path, "rb")  # the caller closes it
        return _beam().open(path, mime_type, compression_type)

    @staticmethod
    def create(
        path: str,
        mime_type: str = _OCTET_STREAM,
        compression_type: str = CompressionTypes.AUTO,
    ) -> IO[bytes]:
        """A write channel, the local parent directories made; compressed as `open` reads."""
        if is_local(path) and _plain(path, compression_type):
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            return open(path, "wb")  # the caller closes it
        return _beam().create(path, mime_type, compression_type)

    @staticmethod
    def rename(source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        if len(source_file_names) == 0:
            return
        if _is_azure(source_file_names[0]):
            from transforms import fs_azure

            fs_azure.rename(source_file_names, destination_file_names)
            return
        if not is_local(source_file_names[0]):
            _beam().rename(source_file_names, destination_file_names)
            return
        if len(source_file_names) != len(destination_file_names):
            raise ValueError("source_file_names and destination_file_names differ in length")
        failed: dict[tuple[str, str], Exception] = {}
        for source, target in zip(source_file_names, destination_file_names, strict=True):
            try:
                os.rename(source, target)
            except OSError as err:
                failed[(source, target)] = OSError(err)
        if failed:
            raise FileSystemError("Rename operation failed", failed)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        """Delete files, and directories with what they hold; each path may be a pattern."""
        if isinstance(paths, str):
            raise FileSystemError(f"Delete passed string argument instead of list: {paths}")
        if len(paths) == 0:
            return
        if _is_azure(paths[0]):
            _delete_azure(paths)
            return
        if not is_local(paths[0]):
            _beam().delete(paths)
            return
        _delete_local(paths)

    @staticmethod
    def match(patterns: Sequence[str], limits: Sequence[int | None] | None = None) -> list:
        """One `MatchResult` per pattern (Beam's pattern syntax, transforms/fs_match.py)."""
        if len(patterns) == 0:
            return []
        azure = _is_azure(patterns[0])
        if not azure and not is_local(patterns[0]):
            return _beam().match(patterns, limits)
        limits = [None] * len(patterns) if limits is None else limits
        if len(limits) != len(patterns):
            raise ValueError("Patterns and limits should be equal in length")
        failed: dict[str, Exception] = {}
        results = []
        for pattern, limit in zip(patterns, limits, strict=True):
            try:
                results.append((match_azure if azure else match_local)(pattern, limit))
            except Exception as err:
                if azure and isinstance(err, _azure_client_missing()):  # says what to install
                    raise
                failed[pattern] = err
        if failed:
            raise FileSystemError("Match operation failed", failed)
        return results


def is_local(path: str) -> bool:
    """Whether Beam would serve `path` with its local filesystem (no `scheme://`)."""
    return FileSystems.get_scheme(path) is None


def join(base: str, *parts: str) -> str:
    """`FileSystems.join`."""
    return FileSystems.join(base, *parts)


def exists(path: str) -> bool:
    """`FileSystems.exists`."""
    return FileSystems.exists(path)


def open_read(path: str) -> IO[bytes]:
    """The file's bytes as stored (no decompression): `FileSystems.open(path, UNCOMPRESSED)`."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def match(pattern: str) -> list[str]:
    """The files `pattern` names, sorted: `FileSystems.match`'s paths."""
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
