"""Reading files by path without importing Beam for a local one.

A path with a scheme (`gs://...`, any `scheme://`) goes to Beam's `FileSystems`, imported on
first use; a path without one is what Beam's `LocalFileSystem` would serve, and is served here
by the standard library in the same way (`os.path.join`, `os.path.exists`, `open(path, "rb")`;
a pattern through `glob`, hidden files included: Beam's `*` and `?` do not stop at a leading
dot either, and the patterns given here name files of one directory).
Importing Beam costs a second or more, which commands that only read a local output (`inspect`,
`verify`) do not need to pay (docs/cli.md).
"""

from __future__ import annotations

import glob
import os
import re
from typing import IO, Any

__all__ = ["exists", "is_local", "join", "match", "open_read"]

# Beam's own test for a path with a scheme (FileSystems.URI_SCHEMA_PATTERN).
_SCHEME = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")


def is_local(path: str) -> bool:
    """Whether Beam would serve `path` with its local filesystem (no `scheme://`)."""
    return _SCHEME.match(path.strip()) is None


def _beam() -> Any:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def join(base: str, *parts: str) -> str:
    """`FileSystems.join`."""
    return os.path.join(base, *parts) if is_local(base) else _beam().join(base, *parts)


def exists(path: str) -> bool:
    """`FileSystems.exists`."""
    return os.path.exists(path) if is_local(path) else _beam().exists(path)


def open_read(path: str) -> IO[bytes]:
    """The file's bytes as stored (no decompression): `FileSystems.open(path, UNCOMPRESSED)`."""
    if is_local(path):
        return open(path, "rb")  # the caller closes it
    from apache_beam.io.filesystem import CompressionTypes

    return _beam().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def match(pattern: str) -> list[str]:
    """The files `pattern` (a glob) names, sorted: `FileSystems.match`'s paths."""
    if is_local(pattern):
        return sorted(p for p in glob.glob(pattern, include_hidden=True) if os.path.isfile(p))
    return sorted(m.path for m in _beam().match([pattern])[0].metadata_list)
