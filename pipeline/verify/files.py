"""The output's files for `tfrecord-etl verify`: the manifest's shape, the shards it lists against
those on disk, the error files of `_errors/`, the one pass over every record, and the counts."""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re

import numpy as np

from pipeline.output.entries import link_on_way
from pipeline.output.manifest import BadRowFiles, Manifest
from pipeline.verify.against_source.compare import Comparison
from pipeline.verify.frames import frame_blocks
from pipeline.verify.records import BATCH, RecordChecker
from pipeline.verify.report import Finding, Findings
from transforms import fs
from transforms.names import ERRORS_DIR
from transforms.write.index import make_index, parse_index

__all__ = ["check_counts", "check_indexes", "check_listing", "read_errors", "read_records"]

_SPAN = 16 * BATCH  # records checked in one compiled pass (a multiple of BATCH)
_SHARD = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})")


def _link_text(link: str, split: str | None) -> str:
    where = f" (split {split})" if split else ""
    return (
        f"{link}: a symbolic link (to {os.readlink(link)}) inside the output{where}; nothing "
        "inside an output is read through a link, so what it points to was not checked"
    )


def check_listing(output: str, manifest: Manifest, findings: Findings) -> set[str]:
    """Listed shards that exist; findings for missing, stale and incompletely named shards."""
    listed, existing = set(), set()
    for entry in manifest.splits.values():  # index files are named like their shard
        for shard in entry.shards:
            if shard.index is not None:
                listed.update((shard.index, posixpath.basename(shard.index)))
    for split, entry in manifest.splits.items():
        counts, indices = set(), set()
        for name in entry.files:
            path = fs.join(output, name)
            listed.update((name, posixpath.basename(name)))
            link = link_on_way(output, path)
            if link is not None:  # never read through a link (pipeline/output/entries.py)
                findings.add(Finding("files", _link_text(link, split), split=split, file=path))
            elif fs.exists(path):
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
    patterns = [  # the flat and tfds layouts' shards, and the tfx layout's (by depth)
        (fs.join(output, "*-?????-of-?????*"), 1),
        (fs.join(output, "Split-*", "*-?????-of-?????*"), 2),
    ]
    for pattern, depth in patterns:
        for path in fs.match(pattern):
            if "/".join(path.replace("\\", "/").split("/")[-depth:]) in listed:
                continue
            findings.add(
                Finding(
                    "stale",
                    f"{path}: named like a shard but not in the manifest "
                    "(a reader globbing the directory would read it)",
                    file=path,
                )
            )
    return existing


def check_indexes(output: str, manifest: Manifest, findings: Findings) -> int:
    """Each listed index file against the index of its shard as it is (transforms/write/index.py);
    findings for one missing, unreadable or different. The indexes checked."""
    checked = 0
    for split, entry in manifest.splits.items():
        for shard in entry.shards:
            if shard.index is None:
                continue
            path, shard_path = fs.join(output, shard.index), fs.join(output, shard.file)
            link = link_on_way(output, path)
            if link is not None:
                findings.add(Finding("index", _link_text(link, split), split=split, file=path))
                continue
            if not fs.exists(path) or not fs.exists(shard_path):
                findings.add(
                    Finding("index", f"{path}: the index of {shard.file} is missing", file=path)
                )
                continue
            try:
                with fs.open_read(path) as f:
                    listed = parse_index(f.read(), path, manifest.compression)
                actual = make_index(shard_path, manifest.compression)
            except ValueError as err:  # the shard's own faults are the frames check's
                findings.add(Finding("index", f"{path}: {err}", split=split, file=path))
                continue
            checked += 1
            if listed.shape != actual.shape or not (listed == actual).all():
                where = _first_difference(listed, actual)
                findings.add(
                    Finding(
                        "index",
                        f"{path}: does not match {shard.file} ({where}): a reader would read "
                        "the wrong bytes; write the output again",
                        split=split,
                        file=path,
                    )
                )
    return checked


def _first_difference(listed: np.ndarray, actual: np.ndarray) -> str:
    if listed.shape[0] != actual.shape[0]:
        return f"{listed.shape[0]} entries, the shard holds {actual.shape[0]} records"
    row = int(np.flatnonzero((listed != actual).any(axis=1))[0])
    return f"line {row + 1} says {listed[row].tolist()}, the record is at {actual[row].tolist()}"


def read_errors(output: str, manifest: Manifest, findings: Findings) -> list[dict]:
    """The run's dead-letter rows; findings for missing, unreadable or miscounted error files."""
    bad = manifest.bad_rows or BadRowFiles()
    rows: list[dict] = []
    names = set()
    for listed in bad.files:
        names.add(posixpath.basename(listed))
        # The manifest holds the path as written; only the file of that name beside this
        # manifest is read (the output may have been moved; a listed path elsewhere never is).
        path = fs.join(output, ERRORS_DIR, posixpath.basename(listed))
        link = link_on_way(output, path)
        if link is not None:
            findings.add(Finding("bad_rows", _link_text(link, None), file=listed))
            continue
        if not fs.exists(path):
            findings.add(
                Finding(
                    "bad_rows",
                    f"{listed}: an error file the manifest lists is missing",
                    file=listed,
                )
            )
            continue
        with fs.open_read(path) as f:
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
    for path in fs.match(fs.join(output, ERRORS_DIR, "*.jsonl")):
        if posixpath.basename(path) not in names:
            findings.add(
                Finding(
                    "stale",
                    f"{path}: an error file the manifest does not list",
                    file=path,
                )
            )
    return rows


def _records(data: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    return [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


@dataclasses.dataclass
class _Pending:
    """Intact records read but not yet checked: (block data, starts, ends, indices) pieces, and
    the faults met among them, (intact records of the file before it, Finding)."""

    pieces: list[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]
    faults: list[tuple[int, Finding]]
    count: int = 0


def _take(pending: _Pending, n: int) -> list[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]:
    """The first `n` pending records, as pieces (data, starts, ends, indices)."""
    parts, left = [], n
    while left:
        data, starts, ends, indices = pending.pieces[0]
        k = min(left, len(starts))
        parts.append((data, starts[:k], ends[:k], indices[:k]))
        if k == len(starts):
            pending.pieces.pop(0)
        else:
            pending.pieces[0] = (data, starts[k:], ends[k:], indices[k:])
        left -= k
    pending.count -= n
    return parts


def _read_shard(
    path: str,
    split: str,
    compression: str,
    checker: RecordChecker,
    comparison: Comparison | None,
    findings: Findings,
) -> int:
    """Frames, crcs and parse of one shard, counted for the comparison; its intact records.

    Records are checked `_SPAN` at a time: a span of plain records without a fault among them
    in one compiled pass; any other span in batches of BATCH records, with each fault reported
    before the batch it came in (so the findings and their order are those of a record-by-
    record reading)."""
    pending = _Pending([], [])
    done = 0  # intact records checked

    def check(n: int, last: bool) -> None:
        nonlocal done
        pieces = _take(pending, n)
        faults = [f for f in pending.faults if last or f[0] < done + n]
        pending.faults = pending.faults[len(faults) :]
        blocks = [(np.frombuffer(d, np.uint8), s, e, i) for d, s, e, i in pieces]
        if not faults and checker.check_block(path, blocks):
            if comparison is not None:
                for data, starts, ends, indices in pieces:
                    comparison.observe(split, path, indices, _records(data, starts, ends))
            done += n
            return
        records = [r for data, starts, ends, _ in pieces for r in _records(data, starts, ends)]
        indices = np.concatenate([i for *_, i in pieces]) if pieces else np.empty(0, np.int64)
        for lo in range(0, n, BATCH):
            hi = min(lo + BATCH, n)
            while faults and faults[0][0] < done + hi:
                findings.add(dataclasses.replace(faults.pop(0)[1], split=split))
            batch, at = records[lo:hi], indices[lo:hi].tolist()
            checker.check(path, batch, at)
            if comparison is not None:
                comparison.observe(split, path, at, batch)
        for _, fault in faults:
            findings.add(dataclasses.replace(fault, split=split))
        done += n

    for block in frame_blocks(path, compression):
        pending.faults += block.faults
        if len(block.starts):
            pending.pieces.append((block.data, block.starts, block.ends, block.indices))
            pending.count += len(block.starts)
        while pending.count >= _SPAN:
            check(_SPAN, False)
    check(pending.count, True)
    return done


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
        paths = [fs.join(output, name) for name in entry.files]
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
