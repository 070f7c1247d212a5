"""`match` for the paths transforms/fs.py serves without Beam's filesystems, with the semantics
of Beam's `FileSystem.match`: the pattern syntax (`translate_pattern`), the results
(`FileMetadata`, `MatchResult`), and the listing they are matched against.

A local pattern (`match_local`) is matched against a directory tree as Beam's `LocalFileSystem`
lists it (`os.walk`, hidden files included); an azfs:// pattern (`match_azure`) against the blobs
of a container, through transforms/fs_azure.py. A pattern without a wildcard names one path: a
local one, a directory too, if it exists; an azfs:// one, that blob or nothing.

`FileSystemError` (Beam's `BeamIOError`) is here because a failed listing raises it; the batch
operations of transforms/fs.py raise it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

__all__ = [
    "FileMetadata",
    "FileSystemError",
    "MatchResult",
    "match_azure",
    "match_local",
    "translate_pattern",
]


class FileMetadata:
    """One matched file, as Beam's `FileMetadata`: path, size and modification time."""

    def __init__(self, path: str, size_in_bytes: int, last_updated_in_seconds: float = 0.0) -> None:
        self.path = path
        self.size_in_bytes = size_in_bytes
        self.last_updated_in_seconds = last_updated_in_seconds

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileMetadata) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, int, float]:
        return (self.path, self.size_in_bytes, self.last_updated_in_seconds)

    def __repr__(self) -> str:
        return f"FileMetadata({self.path}, {self.size_in_bytes}, {self.last_updated_in_seconds})"


class MatchResult:
    """The files one pattern matched, as Beam's `MatchResult`."""

    def __init__(self, pattern: str, metadata_list: list[FileMetadata]) -> None:
        self.pattern = pattern
        self.metadata_list = metadata_list


class FileSystemError(OSError):
    """A batch operation on local files failed (Beam's `BeamIOError`): `exception_details`
    maps each failed path (or pattern, or pair of paths) to its error."""

    def __init__(self, msg: str, exception_details: dict | None = None) -> None:
        super().__init__(f"{msg} with exceptions {exception_details}")
        self.exception_details = exception_details


def translate_pattern(pattern: str) -> str:
    """A file pattern as a regular expression, as Beam's `FileSystem.translate_pattern`: fnmatch
    syntax, except that `*` is `[^/\\\\]*` and `**` is `.*`; no way to quote a wildcard."""
    i, n = 0, len(pattern)
    out = ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out += ".*"
                i += 1
            else:
                out += r"[^/\\]*"
        elif c == "?":
            out += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out += r"\["
            else:
                inside = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if inside[0] == "!":
                    inside = "^" + inside[1:]
                elif inside[0] == "^":
                    inside = "\\" + inside
                out = f"{out}[{inside}]"
        else:
            out += re.escape(c)
    return r"(?ms)" + out + r"\Z"


def _metadata(path: str) -> FileMetadata:
    stat = os.stat(path)
    return FileMetadata(path, stat.st_size, stat.st_mtime)


def _list_tree(root: str) -> Iterator[FileMetadata]:
    """Every file under `root`, at any depth, in `os.walk`'s order (Beam's local listing)."""
    if not os.path.exists(root):
        return
    try:
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    yield _metadata(path)
                except OSError:  # gone since listed
                    pass
    except Exception as err:
        raise FileSystemError("List operation failed", {root: err}) from err


def match_local(pattern: str, limit: int | None) -> MatchResult:
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)  # before the first wildcard
    if prefix == pattern:  # no wildcard: the path itself, a directory too
        found = [_metadata(pattern)] if os.path.exists(pattern) else []
    else:
        found = _list_tree(os.path.dirname(prefix))
    matches = re.compile(translate_pattern(pattern)).match
    listed: list[FileMetadata] = []
    for meta in (m for m in found if matches(m.path)):
        if limit is not None and len(listed) >= limit:
            break
        listed.append(meta)
    return MatchResult(pattern, listed)


def match_azure(pattern: str, limit: int | None) -> MatchResult:
    """Beam's match semantics (as `match_local`) over the blobs of an azfs:// container."""
    from transforms import fs_azure

    if pattern.endswith("/"):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)
    if prefix == pattern:  # no wildcard: that blob, or nothing
        found = fs_azure.stat(pattern)
        return MatchResult(pattern, [] if found is None else [FileMetadata(pattern, *found)])
    matches = re.compile(translate_pattern(pattern)).match
    listed: list[FileMetadata] = []
    for path, size, modified in fs_azure.list_under(prefix):
        if limit is not None and len(listed) >= limit:
            break
        if matches(path):
            listed.append(FileMetadata(path, size, modified))
    return MatchResult(pattern, listed)
