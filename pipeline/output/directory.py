"""The output directory: refuse or clear a complete output, remove what an unfinished run left.

An output is complete when it holds a manifest; everything else in it (shards, temp files,
bad-row files) belongs to a run that did not finish and is removed before a new run writes.
"""

from __future__ import annotations

import glob
import os
import posixpath
import shutil
from collections.abc import Sequence

from pipeline.output.layouts import LAYOUT_FILES
from pipeline.output.manifest import manifest_path, read_manifest
from pipeline.output.schema import SCHEMA_NAME
from transforms.deadletter import ERRORS_DIR
from transforms.fs import FileSystems
from transforms.stats.proto import STATISTICS_DIR, STATISTICS_FILE
from transforms.write.layout import shard_patterns

REPORT_NAME = "report.html"  # written by `tfrecord-etl report` (pipeline/report/)

__all__ = [
    "REPORT_NAME",
    "OutputExistsError",
    "clear_leftovers",
    "clear_previous_output",
    "remove_empty_dir",
]


class OutputExistsError(FileExistsError):
    """The output directory already holds a complete output."""


def clear_previous_output(output: str, overwrite: bool) -> None:
    """Refuse to replace a complete output unless asked; if asked, remove manifest and shards."""
    path = manifest_path(output)
    if not FileSystems.exists(path):
        return
    if not overwrite:
        raise OutputExistsError(
            f"{output} already holds a complete output ({path}); pass --overwrite to replace it"
        )
    old = read_manifest(output)
    FileSystems.delete([path])  # first: an interrupted delete never leaves a manifest behind
    files = [FileSystems.join(output, f) for f in old.files()]
    files += [FileSystems.join(output, f) for f in (old.transform or {}).get("files", [])]
    files += [FileSystems.join(output, f) for f in (old.layout or {}).get("files", [])]
    files += [FileSystems.join(output, f) for f in old.metadata_files()]
    existing = [f for f in files if FileSystems.exists(f)]
    if existing:
        FileSystems.delete(existing)
    directories = set()  # a layout's split directories, statistics/<split>/ and statistics/
    for name in [*old.files(), *old.metadata_files()]:
        while (name := posixpath.dirname(name)) not in ("", "/"):
            directories.add(name)
    for directory in sorted(directories, key=lambda d: -d.count("/")):  # the deepest first
        remove_empty_dir(FileSystems.join(output, directory))


def clear_leftovers(output: str, splits: Sequence[tuple[str, int]]) -> None:
    """Remove what an earlier run that did not finish may have left: shards of the configured
    splits (of any shard count), the sinks' temp directories, bad-row files, a report of an
    earlier output. Runs once no manifest is there (a complete output is refused or cleared
    first). Shards of any layout (transforms/write/layout.py) and the layouts' metadata files
    count."""
    patterns = [p for name, _ in splits for p in shard_patterns(output, name)]
    patterns += [FileSystems.join(output, f) for files in LAYOUT_FILES.values() for f in files]
    patterns += [
        FileSystems.join(output, "beam-temp-*", "*"),
        FileSystems.join(output, ERRORS_DIR, "*"),
        FileSystems.join(output, ERRORS_DIR, "beam-temp-*", "*"),
        FileSystems.join(output, STATISTICS_DIR, "*", STATISTICS_FILE),
        FileSystems.join(output, SCHEMA_NAME),
        FileSystems.join(output, REPORT_NAME),
    ]
    old = [m.path for r in FileSystems.match(patterns) for m in r.metadata_list]
    if old:
        FileSystems.delete(old)
    if "://" not in output:  # a local filesystem also keeps the (now empty) temp directories
        for temp in glob.glob(
            os.path.join(glob.escape(output), "**", "beam-temp-*"), recursive=True
        ):
            shutil.rmtree(temp, ignore_errors=True)


def remove_empty_dir(path: str) -> None:
    if (
        FileSystems.exists(path)
        and not FileSystems.match([FileSystems.join(path, "*")])[0].metadata_list
    ):
        FileSystems.delete([path])
