"""What the shard writers have written so far, for the launcher's progress line.

Each writer instance (one split) keeps two counters, the records it has written to shard files
and the bytes that reached them, and rewrites one small JSON file of its own,
`<directory>/<split>-<id>.json`, at most every REPORT_SECONDS and at the end of each bundle. The
launcher polls the directory (`read_progress`) and adds the files up. The directory is on the
output's filesystem, so this works wherever the workers can write the output; the hot path pays
two additions and a clock read per block of records.

The counts are of what the writers have written, not of what the job has committed: a bundle a
runner retries counts twice here (the summary counts from the manifest).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Mapping, MutableMapping

from transforms.fs import FileSystems

__all__ = ["REPORT_SECONDS", "SinkProgress", "SplitProgress", "read_progress", "total_progress"]

REPORT_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class SplitProgress:
    """Records written to a split's shard files, and their bytes as stored (compressed)."""

    rows: int = 0
    bytes: int = 0

    def __add__(self, other: SplitProgress) -> SplitProgress:
        return SplitProgress(self.rows + other.rows, self.bytes + other.bytes)


class SinkProgress:
    """The counters of one writer instance of split `split`, reported under `directory`."""

    def __init__(self, directory: str, split: str, interval: float = REPORT_SECONDS) -> None:
        self._path = FileSystems.join(directory, f"{split}-{uuid.uuid4().hex}.json")
        self._split = split
        self._interval = interval
        self.rows = 0
        self.bytes = 0
        self._last = time.monotonic()
        self._pending = False
        self._broken = False

    def add(self, rows: int, nbytes: int) -> None:
        """`rows` records (or 0 for trailing bytes) and `nbytes` bytes reached a shard file."""
        self.rows += rows
        self.bytes += nbytes
        self._pending = True
        if time.monotonic() - self._last >= self._interval:
            self.flush()

    def flush(self) -> None:
        """Write the report now, if anything changed since the last one."""
        if not self._pending or self._broken:
            return
        report = {"split": self._split, "rows": self.rows, "bytes": self.bytes}
        try:
            with FileSystems.create(self._path) as f:
                f.write(json.dumps(report).encode("utf-8"))
        except Exception as err:  # the job's output does not depend on its progress line
            self._broken = True
            logging.warning("%s: progress report not written (no more from here): %s",
                            self._path, err)  # fmt: skip
        self._last = time.monotonic()
        self._pending = False


def read_progress(
    directory: str, seen: MutableMapping[str, tuple[str, SplitProgress]] | None = None
) -> dict[str, SplitProgress]:
    """Split -> what its writers reported under `directory`, summed.

    `seen` (report path -> its last good value) carries reports across polls: a report caught
    while it is rewritten, or gone, keeps its previous value."""
    seen = {} if seen is None else seen
    try:
        found = FileSystems.match([FileSystems.join(directory, "*.json")])[0].metadata_list
    except Exception:  # no report yet (the directory is made by the first one)
        found = []
    for meta in found:
        try:
            with FileSystems.open(meta.path) as f:
                report = json.loads(f.read().decode("utf-8"))
            seen[meta.path] = (report["split"], SplitProgress(report["rows"], report["bytes"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being rewritten: the previous value stands
    out: dict[str, SplitProgress] = {}
    for split, counts in seen.values():
        out[split] = out.get(split, SplitProgress()) + counts
    return out


def total_progress(splits: Mapping[str, SplitProgress]) -> SplitProgress:
    total = SplitProgress()
    for counts in splits.values():
        total = total + counts
    return total
