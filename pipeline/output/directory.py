"""The output directory before and after a run: what the launcher checks and clears before the
job writes, and what it removes and reports when the job fails.

An output is complete when it holds a tfrecord-etl manifest; everything else in it that the job
writes (shards, temp folders, bad-row files, statistics, the schema, a report) belongs to a run
that did not finish and is removed before a new run writes. Every entry is reached through
pipeline/output/entries.py, which never follows a link inside the output.

`prepare_output` (the launcher, once the lease is held) checks before anything is deleted:

- the output is a folder, and no entry the job makes a folder of is a file (`_errors`,
  `statistics`, `transform`, a layout's split folder), nor any file it writes a folder;
- `manifest.json`, when there is one, is a tfrecord-etl manifest (another tool's output is
  never replaced, not even with `--overwrite`);
- no link stands anywhere inside the output. Without `--overwrite` a link stops the run with
  a one-line error naming it (exit 2); with `--overwrite` each link is removed, the link itself
  and never its target, and named in a note.

Then a complete output is refused, or with `--overwrite` cleared (manifest first, then what it
lists), and leftovers are removed. `Cleared` says what went; after a failed run,
`remove_run_temp` removes the run's temp folders and `describe_left` says what stays.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shutil
import stat
from collections.abc import Sequence

from pipeline.output.dataset.ledger import DATASET_NAME, is_dataset
from pipeline.output.entries import (
    EntryKindError,
    check_no_link,
    delete,
    link_error,
    list_files,
    scan,
    walk,
)
from pipeline.output.layouts import LAYOUT_FILES
from pipeline.output.lease import LEASE_NAME
from pipeline.output.manifest import MANIFEST_NAME, MANIFEST_VERSION, manifest_path, read_manifest
from pipeline.output.schema import SCHEMA_NAME
from transforms import fs
from transforms.deadletter import ERRORS_DIR
from transforms.preprocess.artifacts import TRANSFORM_DIR
from transforms.stats.paths import STATISTICS_DIR, STATISTICS_FILE
from transforms.write.layout import TFX_SPLIT_DIR, shard_patterns

__all__ = [
    "REPORT_NAME",
    "Cleared",
    "ForeignOutputError",
    "OutputExistsError",
    "clear_leftovers",
    "clear_previous_output",
    "describe_left",
    "prepare_output",
    "remove_empty_dir",
    "remove_run_temp",
]

REPORT_NAME = "report.html"  # written by `tfrecord-etl report` (pipeline/report/)
TEMP_PREFIX = "beam-temp-"  # the sinks' temp folders (both engines name theirs so)


class OutputExistsError(FileExistsError):
    """The output directory already holds a complete output."""


class ForeignOutputError(ValueError):
    """The output directory holds a manifest.json that is not a tfrecord-etl manifest."""


@dataclasses.dataclass
class Cleared:
    """What preparing an output removed: a previous output's files (manifest, shards, other
    files it listed), the links found inside, the leftovers of unfinished runs."""

    manifest: bool = False
    shards: int = 0
    other_files: int = 0
    links: list[str] = dataclasses.field(default_factory=list)
    leftovers: int = 0

    def describe(self) -> str:
        """One phrase of what went, or "" when nothing did."""
        parts = []
        if self.manifest:
            parts.append(
                f"the previous output (manifest.json, {self.shards} shard(s), "
                f"{self.other_files} other file(s))"
            )
        if self.links:
            parts.append(f"{len(self.links)} link(s) (their targets kept)")
        if self.leftovers:
            parts.append(f"{self.leftovers} file(s) an unfinished run had left")
        return ", ".join(parts)


def _folders(splits: Sequence[tuple[str, int]]) -> list[str]:
    """The entries the job makes folders of (relative; `*` matches one name)."""
    folders = [ERRORS_DIR, STATISTICS_DIR, f"{STATISTICS_DIR}/*", TRANSFORM_DIR]
    folders += [TFX_SPLIT_DIR.format(split=name) for name, _ in splits]
    return folders


def _files(splits: Sequence[tuple[str, int]]) -> list[str]:
    """The entries the job writes as files (`*` matches a name, `?` one character)."""
    names = [MANIFEST_NAME, LEASE_NAME, SCHEMA_NAME, REPORT_NAME]
    names += [f"{STATISTICS_DIR}/*/{STATISTICS_FILE}"]
    names += [os.path.relpath(p, "o") for name, _ in splits for p in shard_patterns("o", name)]
    return names + [f for files in LAYOUT_FILES.values() for f in files]


def _check_ours(output: str) -> None:
    """ForeignOutputError when the output's manifest.json is not a tfrecord-etl manifest."""
    path = manifest_path(output)
    if not fs.exists(path):
        return
    check_no_link(output, path)
    try:
        with fs.open_read(path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ForeignOutputError(
            f"{path} is not a tfrecord-etl manifest (not JSON: {err}); the directory holds "
            "another output, which is never replaced (not even with --overwrite): write to "
            "another directory, or move that one away"
        ) from err
    if not isinstance(data, dict) or "manifest_version" not in data or "splits" not in data:
        keys = sorted(data)[:5] if isinstance(data, dict) else type(data).__name__
        raise ForeignOutputError(
            f"{path} is not a tfrecord-etl manifest (no manifest_version and splits; it has "
            f"{keys}): the directory holds another tool's output, which is never replaced (not "
            "even with --overwrite): write to another directory, or move that one away"
        )
    if data["manifest_version"] != MANIFEST_VERSION:
        raise ForeignOutputError(
            f"{path}: manifest_version {data['manifest_version']!r} is not one this version "
            f"writes ({MANIFEST_VERSION}); nothing was deleted: write to another directory"
        )


def prepare_output(
    output: str, overwrite: bool, splits: Sequence[tuple[str, int]]
) -> tuple[Cleared, list[str]]:
    """Check and clear `output` for a new run (the lease held): (what was removed, notes to
    show). Raises, with nothing deleted, for a wrong kind of entry, another tool's manifest, a
    link without `overwrite`, or a complete output without `overwrite`."""
    cleared = Cleared()
    notes: list[str] = []
    if is_dataset(output):  # the spans of `convert --incremental`: never mixed with a run's files
        raise OutputExistsError(
            f"{output} holds an incremental dataset ({fs.join(output, DATASET_NAME)}); add to "
            "it with convert --incremental, or write this run to another directory"
        )
    found = scan(output, _folders(splits), _files(splits))
    for path, needed in found.wrong_kind:
        is_output = os.path.abspath(path) == os.path.abspath(output)
        what = "the output path" if is_output else f"{path}"
        raise EntryKindError(
            f"{what} is a {'folder' if needed == 'file' else 'file'} where the job writes a "
            f"{needed}; nothing was deleted: move it away, or write to another directory"
        )
    if found.links and not overwrite:
        more = f" (and {len(found.links) - 1} more)" if len(found.links) > 1 else ""
        err = link_error(output, found.links[0][0])
        raise type(err)(f"{err}{more}")
    # the lease is a file this run made; a link there was refused when the lease was taken
    links = [(p, t) for p, t in found.links if os.path.basename(p) != LEASE_NAME]
    _check_ours_unless_link(output, links)
    for path, target in links:
        delete(output, [path])  # the link itself
        cleared.links.append(path)
        notes.append(f"removed the link {path} (to {target}); its target was not touched")
    clear_previous_output(output, overwrite, cleared)
    clear_leftovers(output, splits, cleared)
    return cleared, notes


def _check_ours_unless_link(output: str, links: list[tuple[str, str]]) -> None:
    """The manifest check, unless manifest.json is itself a link about to be removed."""
    if any(os.path.basename(p) == MANIFEST_NAME and os.path.dirname(p) == output.rstrip(os.sep)
           for p, _ in links):  # fmt: skip
        return
    _check_ours(output)


def clear_previous_output(output: str, overwrite: bool, cleared: Cleared | None = None) -> None:
    """Refuse to replace a complete output unless asked; if asked, remove manifest and what it
    lists (never through a link)."""
    cleared = Cleared() if cleared is None else cleared
    path = manifest_path(output)
    if not fs.exists(path):
        return
    _check_ours(output)
    if not overwrite:
        raise OutputExistsError(
            f"{output} already holds a complete output ({path}); pass --overwrite to replace it"
        )
    old = read_manifest(output)
    delete(output, [path])  # first: an interrupted delete never leaves a manifest behind
    cleared.manifest = True
    shards = [fs.join(output, f) for f in old.files()]
    others = [fs.join(output, f) for f in (old.transform or {}).get("files", [])]
    others += [fs.join(output, f) for f in (old.layout or {}).get("files", [])]
    others += [fs.join(output, f) for f in old.metadata_files()]
    existing = [f for f in [*shards, *others] if fs.exists(f)]
    delete(output, existing)
    cleared.shards += sum(1 for f in shards if f in existing)
    cleared.other_files += sum(1 for f in others if f in existing)
    directories = set()  # a layout's split directories, statistics/<split>/ and statistics/
    for name in [*old.files(), *old.metadata_files()]:
        while (name := posixpath.dirname(name)) not in ("", "/"):
            directories.add(name)
    for directory in sorted(directories, key=lambda d: -d.count("/")):  # the deepest first
        remove_empty_dir(fs.join(output, directory))


def clear_leftovers(
    output: str, splits: Sequence[tuple[str, int]], cleared: Cleared | None = None
) -> None:
    """Remove what an earlier run that did not finish may have left: shards of the configured
    splits (of any shard count), the sinks' temp directories, bad-row files, statistics, the
    schema and a report of an earlier output. Runs once no manifest is there (a complete output
    is refused or cleared first). Shards of any layout (transforms/write/layout.py) and the
    layouts' metadata files count."""
    patterns = [p for name, _ in splits for p in shard_patterns(output, name)]
    patterns += [fs.join(output, f) for files in LAYOUT_FILES.values() for f in files]
    patterns += [
        fs.join(output, ERRORS_DIR, "*"),
        fs.join(output, STATISTICS_DIR, "*", STATISTICS_FILE),
        fs.join(output, SCHEMA_NAME),
        fs.join(output, REPORT_NAME),
    ]
    old = list_files(output, patterns)
    temps = _temp_dirs(output)
    if not fs.is_local(output):
        old += list_files(output, [fs.join(output, f"{TEMP_PREFIX}*", "*")])
    delete(output, old)
    delete(output, temps)
    if cleared is not None:
        cleared.leftovers += len(old) + len(temps)


def _temp_dirs(output: str) -> list[str]:
    """The sinks' temp folders of a local output, at any depth (not below a link)."""
    if not fs.is_local(output) or not os.path.isdir(output):
        return []
    return [
        path
        for path, mode in walk(output)
        if os.path.basename(path).startswith(TEMP_PREFIX) and os.path.isdir(path)
        and not os.path.islink(path)
    ]  # fmt: skip


def remove_run_temp(output: str) -> list[str]:
    """After a failed local run: remove the run's temp folders (what a re-run would clear
    anyway); their paths."""
    temps = _temp_dirs(output)
    delete(output, temps)
    return temps


def describe_left(output: str) -> str:
    """What a failed run left in a local output, by top-level entry ("_errors/ (2 files),
    train-00000-of-00001.tfrecord.gz"), or "nothing"; the lease is not counted."""
    if not fs.is_local(output) or not os.path.isdir(output):
        return "nothing"
    counts: dict[str, int] = {}
    for path, mode in walk(output):
        rel = os.path.relpath(path, output).split(os.sep)
        if rel == [LEASE_NAME] or stat.S_ISDIR(mode):
            continue
        top = rel[0] + ("/" if len(rel) > 1 else "")
        counts[top] = counts.get(top, 0) + 1
    if not counts:
        return "nothing"
    return ", ".join(
        f"{name} ({n} file{'s' if n > 1 else ''})" if name.endswith("/") else name
        for name, n in sorted(counts.items())
    )


def remove_empty_dir(path: str) -> None:
    """Remove a folder that holds no file at any depth (empty folders only); a link is never
    followed nor removed here. Object stores have no folders: an empty prefix is deleted."""
    if fs.is_local(path):
        if not os.path.isdir(path) or os.path.islink(path):
            return
        if all(stat.S_ISDIR(mode) for _, mode in walk(path)):
            shutil.rmtree(path)
        return
    if fs.exists(path) and not fs.FileSystems.match([fs.join(path, "*")])[0].metadata_list:
        fs.FileSystems.delete([path])
