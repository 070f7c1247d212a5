"""The output's files for `tfrecord-etl verify`: the manifest's shape, the shards it lists against
those on disk, the error files of `_errors/`, the one pass over every record, and the counts."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re

from apache_beam.io.filesystems import FileSystems

from pipeline.manifest import BadRowFiles, Manifest
from pipeline.verify.compare import Comparison
from pipeline.verify.records import RecordChecker, read_frames
from pipeline.verify.report import Finding, Findings
from transforms.deadletter import ERRORS_DIR

__all__ = ["check_counts", "check_listing", "read_errors", "read_records"]

_BATCH = 2048  # records parsed and counted together
_SHARD = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})")


def check_listing(output: str, manifest: Manifest, findings: Findings) -> set[str]:
    """Listed shards that exist; findings for missing, stale and incompletely named shards."""
    listed, existing = set(), set()
    for split, entry in manifest.splits.items():
        counts, indices = set(), set()
        for name in entry.files:
            path = FileSystems.join(output, name)
            listed.add(posixpath.basename(name))
            if FileSystems.exists(path):
                existing.add(path)
            else:
                findings.add(
                    Finding(
                        "files",
                        f"{path}: listed in the manifest (split {split}) but missing",
                        split=split,
                        file=path,
                    )
                )
            m = _SHARD.match(posixpath.basename(name))
            if m:
                counts.add(int(m["count"]))
                indices.add(int(m["index"]))
        if len(counts) == 1 and indices != set(range(next(iter(counts)))):
            gone = sorted(set(range(next(iter(counts)))) - indices)
            findings.add(
                Finding(
                    "files",
                    f"split {split}: its shard names count {next(iter(counts))} "
                    f"shards, the manifest lists {len(entry.files)} (not: {gone})",
                    split=split,
                )
            )
    pattern = FileSystems.join(output, "*-?????-of-?????*")
    for meta in FileSystems.match([pattern])[0].metadata_list:
        if posixpath.basename(meta.path) not in listed:
            findings.add(
                Finding(
                    "stale",
                    f"{meta.path}: named like a shard but not in the manifest "
                    "(a reader globbing the directory would read it)",
                    file=meta.path,
                )
            )
    return existing


def read_errors(output: str, manifest: Manifest, findings: Findings) -> list[dict]:
    """The run's dead-letter rows; findings for missing, unreadable or miscounted error files."""
    bad = manifest.bad_rows or BadRowFiles()
    rows: list[dict] = []
    names = set()
    for listed in bad.files:
        names.add(posixpath.basename(listed))
        # The manifest holds the path as written; the file beside this manifest comes first
        # (the output may have been moved or copied since).
        path = FileSystems.join(output, ERRORS_DIR, posixpath.basename(listed))
        if not FileSystems.exists(path):
            path = listed
        if not FileSystems.exists(path):
            findings.add(
                Finding(
                    "bad_rows",
                    f"{listed}: an error file the manifest lists is missing",
                    file=listed,
                )
            )
            continue
        with FileSystems.open(path) as f:
            for number, line in enumerate(f.read().decode("utf-8").splitlines(), 1):
                try:
                    rows.append(json.loads(line))
                except ValueError as err:
                    findings.add(
                        Finding("bad_rows", f"{path}: line {number} is not JSON: {err}", file=path)
                    )
    if len(rows) != bad.count:
        findings.add(
            Finding(
                "bad_rows",
                f"{output}/{ERRORS_DIR}: {len(rows)} row(s) in the "
                f"error files, the manifest's bad_rows.count is {bad.count}",
            )
        )
    pattern = FileSystems.join(output, ERRORS_DIR, "*.jsonl")
    for meta in FileSystems.match([pattern])[0].metadata_list:
        if posixpath.basename(meta.path) not in names:
            findings.add(
                Finding(
                    "stale",
                    f"{meta.path}: an error file the manifest does not list",
                    file=meta.path,
                )
            )
    return rows


def _read_shard(
    path: str,
    split: str,
    compression: str,
    checker: RecordChecker,
    comparison: Comparison | None,
    findings: Findings,
) -> int:
    """Frames, crcs and parse of one shard, counted for the comparison; its intact records."""
    count = 0
    batch: list[bytes] = []
    indices: list[int] = []

    def flush() -> None:
        checker.check(path, batch, indices)
        if comparison is not None:
            comparison.observe(split, path, indices, batch)
        batch.clear()
        indices.clear()

    for index, _, data, fault in read_frames(path, compression):
        if fault is not None:
            findings.add(dataclasses.replace(fault, split=split))
        if data is None:
            continue
        batch.append(data)
        indices.append(index)
        count += 1
        if len(batch) >= _BATCH:
            flush()
    if batch:
        flush()
    return count


def read_records(
    output: str,
    manifest: Manifest,
    existing: set[str],
    checker: RecordChecker,
    comparison: Comparison | None,
    findings: Findings,
) -> dict[str, int]:
    """One pass over every listed shard; the intact records per split."""
    per_split = {}
    for split, entry in manifest.splits.items():
        paths = [FileSystems.join(output, name) for name in entry.files]
        per_split[split] = sum(
            _read_shard(p, split, manifest.compression, checker, comparison, findings)
            for p in paths
            if p in existing
        )
    return per_split


def check_counts(manifest: Manifest, per_split: dict[str, int], findings: Findings) -> None:
    for split, entry in manifest.splits.items():
        if per_split[split] != entry.rows:
            findings.add(
                Finding(
                    "counts",
                    f"split {split}: {per_split[split]} intact record(s) in "
                    f"its files, the manifest says {entry.rows}",
                    split=split,
                )
            )
    listed = sum(e.rows for e in manifest.splits.values())
    if manifest.rows != listed:
        findings.add(
            Finding(
                "counts",
                f"the manifest's rows ({manifest.rows}) is not the sum "
                f"of its splits' rows ({listed})",
            )
        )
