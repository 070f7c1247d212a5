"""What the report reads from an output and where it writes: the manifest, the statistics
files, the bad-row files, shard sizes, `report.html`.

A local output is read with the standard library; an output with a scheme (`gs://...`) through
Beam's FileSystems (transforms/fs.py imports it only then), so `tfrecord-etl report` on a
local output imports neither Beam nor TensorFlow. Every file the manifest names is checked to
stay inside the output directory (transforms/confine.py) before it is opened.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Iterator
from typing import Any

from pipeline.output.dataset import read_dataset, whole_manifest
from pipeline.output.entries import check_no_link
from pipeline.output.manifest import MANIFEST_NAME, Manifest
from transforms.confine import check_inside
from transforms.fs import FileSystems
from transforms.names import ERRORS_DIR

__all__ = [
    "BAD_ROWS_READ",
    "ERRORS_DIR",
    "BadRows",
    "join",
    "load_manifest",
    "read_bad_rows",
    "read_bytes",
    "shard_bytes",
    "write_text",
]

BAD_ROWS_READ = 100_000  # bad-row lines read for the counts by stage and column
BAD_ROWS_SHOWN = 20


def _remote(path: str) -> bool:
    return "://" in path


def join(output: str, relative: str) -> str:
    """The path of `relative` inside `output`; LinkInOutputError when a link stands on its way
    (pipeline/output/entries.py: nothing inside an output is read or written through a link)."""
    if _remote(output):
        return posixpath.join(output, relative)
    return check_no_link(output, os.path.join(output, relative))


def read_bytes(path: str) -> bytes:
    if not _remote(path):
        with open(path, "rb") as f:
            return f.read()
    with FileSystems.open(path) as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    data = text.encode("utf-8")
    if not _remote(path):
        with open(path, "wb") as f:
            f.write(data)
        return
    with FileSystems.create(path, mime_type="text/html") as f:
        f.write(data)


def _size(path: str) -> int | None:
    if not _remote(path):
        try:
            return os.path.getsize(path)
        except OSError:
            return None
    found = [m.size_in_bytes for r in FileSystems.match([path]) for m in r.metadata_list]
    return found[0] if found else None


def load_manifest(output: str) -> Manifest:
    """The output's manifest (an incremental dataset's: its spans read as one, each span's
    statistics side by side); FileNotFoundError without one, ValueError when malformed."""
    path = join(output, MANIFEST_NAME)
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        dataset = read_dataset(output)  # an incremental dataset: its spans as one output
        if dataset is not None:
            return whole_manifest(output, dataset)
        raise FileNotFoundError(
            f"{path}: no manifest; the directory is not a complete tfrecord-etl output"
        ) from None
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from err
    return Manifest.from_json(parsed, path)


def shard_bytes(output: str, manifest: Manifest) -> dict[str, list[tuple[str, int | None, int]]]:
    """split -> [(file, records, bytes)], bytes from the manifest, or from the file when the
    writer did not count them (Beam's own sink; -1 when the file is gone)."""
    out: dict[str, list[tuple[str, int | None, int]]] = {}
    for name, split in manifest.splits.items():
        entries = {s.file: s for s in split.shards}
        rows = []
        for file in split.files:
            shard = entries.get(file)
            size = shard.bytes if shard is not None else None
            if size is None:
                size = _size(join(output, file))
            rows.append((file, None if shard is None else shard.rows, -1 if size is None else size))
        out[name] = rows
    return out


@dataclasses.dataclass(frozen=True)
class BadRows:
    """The bad rows of a run: the manifest's count, counts by (stage, column) over the lines
    read, and the first few rows as written."""

    count: int
    read: int  # lines read from the error files (at most BAD_ROWS_READ)
    by_cause: dict[tuple[str, str], int]
    first: tuple[dict[str, Any], ...]
    files: tuple[str, ...]


def _lines(output: str, files: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    for listed in files:
        name = posixpath.basename(listed.replace("\\", "/"))
        relative = f"{ERRORS_DIR}/{name}"
        check_inside(relative, join(output, MANIFEST_NAME), "bad_rows.files")
        path = join(output, relative)
        for line in read_bytes(path).decode("utf-8", errors="replace").splitlines():
            if line.strip():
                yield relative, line


def read_bad_rows(output: str, manifest: Manifest) -> BadRows:
    """The bad rows the manifest lists, read from `_errors/` (found by their file names)."""
    files = () if manifest.bad_rows is None else manifest.bad_rows.files
    by_cause: dict[tuple[str, str], int] = {}
    first: list[dict[str, Any]] = []
    read = 0
    for relative, line in _lines(output, files):
        if read >= BAD_ROWS_READ:
            break
        try:
            row = json.loads(line)
        except ValueError:
            row = {"stage": "?", "reason": f"{relative}: not a JSON line: {line[:200]}"}
        if not isinstance(row, dict):
            row = {"stage": "?", "reason": f"{relative}: not a JSON object: {line[:200]}"}
        read += 1
        cause = (str(row.get("stage", "?")), str(row.get("column") or "(whole row)"))
        by_cause[cause] = by_cause.get(cause, 0) + 1
        if len(first) < BAD_ROWS_SHOWN:
            first.append(row)
    return BadRows(manifest.bad_row_count, read, by_cause, tuple(first), tuple(files))
