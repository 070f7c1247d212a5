"""A file reference -> the file's bytes, bounded by `max_file_bytes`.

A reference is a path or a URI: `scheme://...` (gs:// and any filesystem Beam has) is read as
it is through transforms/fs.py (Beam's FileSystems, imported then); an absolute local path as
it is; any other path relative to the directory of the table it came from (a table on gs://
makes its relative references gs:// too). Nothing is decompressed: the bytes are the file's.

What is wrong with one file raises `BadFileError` (its bad row's reason): no such file, not a
regular file, not readable, larger than the limit. Any other error (a network fault the
filesystem gave up retrying) propagates and fails the work item, as a read of the table itself
would: a row is never set aside for a fault that is not its file's.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

import pyarrow as pa
import pyarrow.compute as pc

from transforms import fs

__all__ = [
    "OPEN_FLAGS",
    "BadFileError",
    "file_size",
    "read_file",
    "read_local",
    "resolve",
    "resolve_column",
    "resolve_local_column",
    "table_directory",
]

_SCHEME = r"^[a-zA-Z][-a-zA-Z0-9+.]*://"  # as transforms/fs.py tells a path with a scheme


class BadFileError(Exception):
    """What is wrong with one file (the reason of its bad row, without file, row and column)."""


OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_READ_CHUNK = 1 << 24


def table_directory(source: str) -> str:
    """The directory the references of table `source` are relative to."""
    if fs.is_local(source):
        return os.path.dirname(source)
    return source.rsplit("/", 1)[0]


def resolve(reference: str, directory: str) -> str:
    """The path `reference` names, relative references taken from `directory`."""
    if not reference:
        raise BadFileError("an empty path")
    if not fs.is_local(reference) or os.path.isabs(reference):
        return reference
    if fs.is_local(directory):
        return os.path.join(directory, reference)
    scheme, rest = directory.split("://", 1)
    joined = posixpath.normpath(posixpath.join(rest, reference))
    bucket = rest.split("/", 1)[0]
    if joined != bucket and not joined.startswith(bucket + "/"):
        raise BadFileError(f"leads out of {scheme}://{bucket}")
    return f"{scheme}://{joined}"


def resolve_column(refs: pa.Array, directory: str) -> list[str | BadFileError | None]:
    """`resolve` of every reference of a column: the path, None for a null, or the fault
    (an empty reference is "", which `read_file` refuses); on the whole column at once when
    the table is local."""
    if pa.types.is_dictionary(refs.type):
        refs = refs.cast(refs.type.value_type)
    if not fs.is_local(directory):
        out: list[str | BadFileError | None] = []
        for ref in refs.to_pylist():
            try:
                out.append(None if ref is None else resolve(ref, directory))
            except BadFileError as fault:
                out.append("" if ref == "" else BadFileError(f"{ref}: {fault}"))
        return out
    return resolve_local_column(refs, directory).to_pylist()


def resolve_local_column(refs: pa.Array, directory: str) -> pa.Array:
    """`resolve` of every reference of a column of a local table (`directory` is local), as an
    Arrow string array: the path, null for a null; an empty reference stays "" (which
    `read_file` refuses)."""
    if pa.types.is_dictionary(refs.type):
        refs = refs.cast(refs.type.value_type)
    if not directory:
        return refs
    kept = pc.or_kleene(
        pc.or_kleene(pc.match_substring_regex(refs, _SCHEME), pc.starts_with(refs, "/")),
        pc.equal(refs, ""),
    )
    prefix = directory if directory.endswith("/") else directory + "/"
    joined = pc.binary_join_element_wise(prefix, refs, "")
    return pc.if_else(kept, refs, joined)


def _too_big(limit: int, size: int | None) -> BadFileError:
    what = f"{size:,} bytes" if size is not None else f"more than {limit:,} bytes"
    return BadFileError(f"a file of {what}, larger than max_file_bytes {limit:,}")


def read_local(path: str, limit: int) -> bytes:
    """`read_file` of a local path."""
    if not path:
        raise BadFileError("an empty path")
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        raise BadFileError("file not found") from None
    except ValueError:  # a NUL byte in the path, which no file's name can hold
        raise BadFileError("a path with a NUL byte") from None
    except OSError as err:
        raise BadFileError(f"cannot open the file ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise BadFileError(kind)
        size = info.st_size
        if size > limit:
            raise _too_big(limit, size)
        first = os.read(fd, size + 1) if size < _READ_CHUNK else b""
        if len(first) == size:  # one read to the size fstat gave: the file as it was then
            return first
        parts, total = ([first], len(first)) if first else ([], 0)
        while True:  # to the end: a short read, or a file that grew since fstat
            part = os.read(fd, min(_READ_CHUNK, limit + 1 - total) or 1)
            if not part:
                break
            parts.append(part)
            total += len(part)
            if total > limit:
                raise _too_big(limit, None)
    except OSError as err:
        if err.errno == errno.EISDIR:
            raise BadFileError("a directory") from None
        raise BadFileError(f"cannot read the file ({err.strerror or err})") from None
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _remote_fault(err: Exception) -> BadFileError | None:
    """The file's own fault in an object store's error (not found, not allowed), else None."""
    code = getattr(err, "code", None)
    name = type(err).__name__
    if isinstance(err, FileNotFoundError) or code == 404 or name == "NotFound":
        return BadFileError("file not found")
    if isinstance(err, PermissionError) or code == 403 or name == "Forbidden":
        return BadFileError("access denied")
    cause = err.__cause__ or err.__context__
    return _remote_fault(cause) if isinstance(cause, Exception) else None


def _read_remote(path: str, limit: int) -> bytes:
    try:
        with fs.open_read(path) as f:
            data = f.read(limit + 1)
    except Exception as err:
        fault = _remote_fault(err)
        if fault is None:
            raise
        raise fault from None
    if len(data) > limit:
        raise _too_big(limit, None)
    return data


def read_file(path: str, limit: int) -> bytes:
    """The bytes of the file at `path` (a resolved reference); BadFileError when they cannot be
    had or are more than `limit`."""
    if not path:
        raise BadFileError("an empty path")
    if fs.is_local(path):
        return read_local(path, limit)
    return _read_remote(path, limit)


def file_size(path: str) -> int | None:
    """The size of the file at `path` (a resolved reference), None when it cannot be had (the
    plan's estimate of the records' bytes; the run finds out why)."""
    try:
        if fs.is_local(path):
            return os.stat(path).st_size
        found = fs.FileSystems.match([path])[0].metadata_list
    except Exception:  # an estimate: any fault leaves this file out of it
        return None
    return found[0].size_in_bytes if found else None
