"""Paths a written file names (a manifest, a statistics file) checked to stay inside its directory.

An output's manifest lists its shards and artifact files relative to the output directory, and
a statistics file names its vocabulary files relative to its own directory. `--overwrite`
deletes what the manifest lists, and verify, inspect, the reader and `--transform-artifacts`
read it: a hand-edited or corrupted file naming `../victim`, `/etc/passwd` or
`gs://other-bucket/x` must not make them delete or read anything outside. Joined to the
directory, such a name would escape it (`FileSystems.join(dir, "/etc/x")` is `/etc/x` on a local
filesystem), so it is refused where the file is parsed, with the file, the key and the path.
"""

from __future__ import annotations

import re

__all__ = ["check_inside"]

# A scheme (gs:, file:, s3:, http:) or a drive letter (C:) at the start of the name.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _why_outside(name: str) -> str | None:
    """Why `name` is not a path inside its directory, or None when it is."""
    if not name:
        return "it is empty"
    if "\x00" in name:
        return "it holds a NUL character"
    if _SCHEME.match(name):
        return "it has a scheme or drive (an absolute location)"
    if name.startswith(("/", "\\")):
        return "it is absolute"
    if ".." in re.split(r"[/\\]", name):
        return "it has a '..' segment"
    return None


def check_inside(name: object, origin: str, key: str) -> str:
    """`name` when it is a relative path that stays inside its directory; ValueError naming
    `origin` (the file that holds it), `key` and the path otherwise."""
    if not isinstance(name, str):
        raise ValueError(f"{origin}: key {key!r}: {name!r} is not a path (a string)")
    why = _why_outside(name)
    if why is not None:
        raise ValueError(
            f"{origin}: key {key!r}: path {name!r} leaves the directory of {origin} ({why}); "
            "the paths it lists must be relative, with no '..', no leading '/' and no scheme. "
            "The file was edited or corrupted: restore it, or write the output again"
        )
    return name
