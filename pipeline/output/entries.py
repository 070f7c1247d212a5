"""The one rule for the entries of an output directory on a local disk: nothing inside the
output is ever followed through a link.

The output path itself may be a symbolic link (a user's choice: the output lives elsewhere), but
below it every entry the project reads, writes, renames or deletes is reached without following
a symbolic link (or, on Windows, a junction): a link found inside an output would otherwise let
`--overwrite` delete, or `verify` read, a user's files outside it. Every place that touches an
output's entries goes through this module:

- `entry(output, name)`: the path of a listed entry (a shard, the manifest, a statistics or
  bad-row file, the lease), refused when its name leaves the directory (transforms/confine.py)
  or when a link stands anywhere on its way (`LinkInOutputError`);
- `scan(output)`: every link, and every file where the job needs a folder (and folder where it
  needs a file), found without descending into a link: what the launcher looks at before
  anything is deleted (pipeline/output/directory.py);
- `list_files`, `delete`: listing and deleting below the output without following a link:
  a link is deleted as a link (`os.unlink`, never its target), a folder's own links likewise.

Object stores (gs://) have no links: there these functions only join, list and delete.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator, Sequence

from transforms import fs
from transforms.confine import check_inside
from transforms.fs_match import translate_pattern

__all__ = [
    "EntryKindError",
    "LinkInOutputError",
    "OutputScan",
    "check_no_link",
    "delete",
    "entry",
    "is_link",
    "link_error",
    "link_on_way",
    "list_files",
    "relative",
    "scan",
    "walk",
]


class LinkInOutputError(ValueError):
    """A link inside an output directory stands where the project would read, write or delete."""


class EntryKindError(ValueError):
    """A file where the job needs a folder, or a folder where it needs a file."""


def _local(output: str) -> bool:
    return fs.is_local(output)


def is_link(path: str) -> bool:
    """Whether `path` itself (not what it points to) is a symbolic link or a junction."""
    if os.path.islink(path):
        return True
    isjunction = getattr(os.path, "isjunction", None)  # Windows junctions (Python 3.12+)
    return bool(isjunction and isjunction(path))


def _target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def relative(output: str, path: str) -> str:
    """`path` relative to `output` (the same path when it is not below it)."""
    rel = os.path.relpath(path, output) if _local(output) else path
    return path if rel.startswith("..") else rel


def link_on_way(output: str, path: str) -> str | None:
    """The first entry from `output` (not included) down to `path` (included) that is a link,
    or None. Local outputs only; `path` must be below `output`."""
    if not _local(output):
        return None
    rel = os.path.relpath(path, output)
    if rel == ".":
        return None
    current = output
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            if is_link(current):
                return current
        except OSError:
            return None
        if not os.path.lexists(current):
            return None  # nothing further down exists: no link on the way
    return None


def link_error(output: str, link: str) -> LinkInOutputError:
    """The one-line error for a link found inside `output`."""
    return LinkInOutputError(
        f"{link} is a symbolic link (to {_target(link)}) inside the output directory {output}; "
        "nothing inside an output is read, written or deleted through a link: remove the link "
        "(its target is kept), or pass --overwrite to convert, which removes the link itself "
        "and never its target"
    )


def check_no_link(output: str, path: str) -> str:
    """`path` when no link stands between `output` and it; LinkInOutputError otherwise."""
    link = link_on_way(output, path)
    if link is not None:
        raise link_error(output, link)
    return path


def entry(output: str, name: str, origin: str = "manifest.json", key: str = "files") -> str:
    """The path of the entry `name` (relative to `output`, as a manifest lists it): refused
    when the name leaves the directory (ValueError naming `origin` and `key`) or when a link
    stands on its way (LinkInOutputError)."""
    check_inside(name, origin, key)
    return check_no_link(output, fs.join(output, name))


@dataclasses.dataclass(frozen=True)
class OutputScan:
    """What `scan` found inside a local output: links (path, target), and entries of the
    wrong kind (path, what the job needs there)."""

    links: tuple[tuple[str, str], ...] = ()
    wrong_kind: tuple[tuple[str, str], ...] = ()


def scan(output: str, folders: Iterable[str] = (), files: Iterable[str] = ()) -> OutputScan:
    """Walk a local `output` without following links: every link inside it at any depth, and among
    the names `folders` (relative paths the job makes folders of; `*` matches within one name, `?`
    one character) and `files` (names it writes as files) those that exist as the other kind. The
    output itself must be a folder when it exists (a file there is reported as wrong kind)."""
    if not _local(output) or not os.path.exists(output):
        return OutputScan()
    if not os.path.isdir(output):
        return OutputScan(wrong_kind=((output, "folder"),))
    folder_res = [re.compile(_name_pattern(f)) for f in folders]
    file_res = [re.compile(_name_pattern(f)) for f in files]
    links: list[tuple[str, str]] = []
    wrong: list[tuple[str, str]] = []
    for path, mode in walk(output):
        rel = os.path.relpath(path, output).replace(os.sep, "/")
        if stat.S_ISLNK(mode) or is_link(path):
            links.append((path, _target(path)))
        elif stat.S_ISDIR(mode) and any(r.fullmatch(rel) for r in file_res):
            wrong.append((path, "file"))
        elif not stat.S_ISDIR(mode) and any(r.fullmatch(rel) for r in folder_res):
            wrong.append((path, "folder"))
    return OutputScan(tuple(links), tuple(wrong))


def _name_pattern(name: str) -> str:
    """A relative name with `*` (any name part) and `?` (one character) as a regex."""
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in name)


def walk(root: str) -> Iterator[tuple[str, int]]:
    """(path, lstat mode) of every entry below `root`, depth first, not descending into links."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as found:
                entries = sorted(found, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            try:
                mode = e.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            yield e.path, mode
            if stat.S_ISDIR(mode) and not e.is_symlink() and not is_link(e.path):
                stack.append(e.path)


def list_files(output: str, patterns: Sequence[str]) -> list[str]:
    """The files below `output` (links included as entries, never followed) whose path matches
    one of `patterns` (Beam's pattern syntax, transforms/fs_match.py), in listing order. A pattern
    must lie below `output`. Object stores: Beam's own match."""
    if not patterns:
        return []
    if not _local(output):
        return [m.path for r in fs.FileSystems.match(list(patterns)) for m in r.metadata_list]
    compiled = [re.compile(translate_pattern(p)) for p in patterns]
    return [
        path
        for path, mode in walk(output)
        if not stat.S_ISDIR(mode) and any(c.match(path) for c in compiled)
    ]


def delete(output: str, paths: Sequence[str]) -> None:
    """Delete entries below `output`: a file or a link with `os.unlink` (a link's target is
    never touched), a folder with what it holds (its own links unlinked, not followed). Every
    path is checked to have no link on its way (LinkInOutputError). Missing paths are skipped.
    Object stores: Beam's delete."""
    if not paths:
        return
    if not _local(output):
        fs.FileSystems.delete(list(paths))
        return
    for path in paths:
        parent = os.path.dirname(path.rstrip(os.sep)) or "."
        if parent != output.rstrip(os.sep) and os.path.abspath(parent) != os.path.abspath(output):
            check_no_link(output, parent)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode) and not is_link(path):
            shutil.rmtree(path)  # unlinks the links it holds, never follows them
        else:
            os.unlink(path)
