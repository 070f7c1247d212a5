"""The records a source gives against the records an output holds, per split, as multisets.

Each record is known by the 16-byte BLAKE2b digest of its serialized Example. The expected side
is kept as sorted arrays (digest, source file, source row: 28 bytes per expected record); the
output is streamed past them and only counted (plus the records no expected digest matches, up
to `keep` of them, for the report). Two different records get the same digest with probability
2**-128; over n records a collision anywhere has probability below n**2 / 2**129 (under 1e-14
for a trillion records), and only a collision could hide a difference.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["Comparison", "Duplicate", "Extra", "Missing", "digests"]

_FILE_SHIFT = 40  # location code: file index << 40 | record index in the file


def digests(records: Sequence[bytes]) -> np.ndarray:
    """The 16-byte BLAKE2b digest of each record, as a numpy 'S16' array (sortable)."""
    if not records:
        return np.empty(0, "S16")
    joined = b"".join(hashlib.blake2b(r, digest_size=16).digest() for r in records)
    return np.frombuffer(joined, "S16")


@dataclasses.dataclass(frozen=True)
class Missing:
    """Source rows whose record the split holds fewer times (`found`) than they give it."""

    split: str
    rows: list[tuple[str, int]]  # (source file, row), every row giving this record
    found: int
    digest: bytes


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """An output record beyond the number of times the source gives it."""

    split: str
    file: str
    record: int
    copy: int  # 2 for the second copy, ...
    first: tuple[str, int]  # where the first copy is
    rows: list[tuple[str, int]]


@dataclasses.dataclass(frozen=True)
class Extra:
    """An output record that no source row gives."""

    split: str
    file: str
    record: int
    data: bytes
    digest: bytes


@dataclasses.dataclass
class _Split:
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    digests: np.ndarray | None = None  # unique, sorted
    starts: np.ndarray | None = None  # where each unique digest's rows start in files/rows
    counts: np.ndarray | None = None  # expected copies
    files: np.ndarray | None = None  # source file index of each expected record, by digest
    rows: np.ndarray | None = None
    seen: np.ndarray | None = None  # output copies counted
    first: np.ndarray | None = None  # location code of the first copy


class Comparison:
    """Expected records (`expect`, then `freeze`), then the output's (`observe`), then the
    differences. `full=False` (a sample of the source): records no sampled row gives are not
    judged, so only missing rows are found."""

    def __init__(self, splits: Sequence[str], full: bool = True, keep: int = 200) -> None:
        self.full = full
        self.keep = keep
        self.sources: list[str] = []
        self._source_ids: dict[str, int] = {}
        self.files: list[str] = []
        self._file_ids: dict[str, int] = {}
        self._splits = {name: _Split([]) for name in splits}
        self.expected = 0
        self.duplicates: list[Duplicate] = []
        self.extras: list[Extra] = []
        self.duplicate_count = 0
        self.extra_count = 0

    def expect(self, split: str, source: str, rows: np.ndarray, records: Sequence[bytes]) -> None:
        """Records `records` (from source rows `rows`) belong in `split`."""
        sid = self._source_ids.setdefault(source, len(self.sources))
        if sid == len(self.sources):
            self.sources.append(source)
        files = np.full(len(records), sid, np.int32)
        self._splits[split].parts.append((digests(records), files, np.asarray(rows, np.int64)))
        self.expected += len(records)

    def freeze(self) -> None:
        for s in self._splits.values():
            parts = s.parts or [(np.empty(0, "S16"), np.empty(0, np.int32), np.empty(0, np.int64))]
            d = np.concatenate([p[0] for p in parts])
            order = np.argsort(d, kind="stable")
            d = d[order]
            s.files = np.concatenate([p[1] for p in parts])[order]
            s.rows = np.concatenate([p[2] for p in parts])[order]
            s.digests, s.starts, s.counts = np.unique(d, return_index=True, return_counts=True)
            s.seen = np.zeros(len(s.digests), np.int64)
            s.first = np.full(len(s.digests), -1, np.int64)
            s.parts = []

    def _rows(self, s: _Split, i: int) -> list[tuple[str, int]]:
        lo, hi = int(s.starts[i]), int(s.starts[i] + s.counts[i])
        return [
            (self.sources[f], int(r)) for f, r in zip(s.files[lo:hi], s.rows[lo:hi], strict=True)
        ]

    def _place(self, code: int) -> tuple[str, int]:
        return self.files[code >> _FILE_SHIFT], code & ((1 << _FILE_SHIFT) - 1)

    def observe(
        self, split: str, file: str, indices: Sequence[int], records: Sequence[bytes]
    ) -> None:
        """Count the output records `records` (record `indices` of `file`, in `split`)."""
        fid = self._file_ids.setdefault(file, len(self.files))
        if fid == len(self.files):
            self.files.append(file)
        s = self._splits[split]
        d = digests(records)
        pos = np.searchsorted(s.digests, d)
        safe = np.minimum(pos, max(len(s.digests) - 1, 0))
        found = (pos < len(s.digests)) & (s.digests[safe] == d if len(s.digests) else False)
        at = np.flatnonzero(found)
        idx = pos[at]
        codes = (np.int64(fid) << _FILE_SHIFT) + np.asarray(indices, np.int64)[at]
        # Copy number of each found record: earlier batches' copies + its rank in this batch.
        order = np.argsort(idx, kind="stable")
        ranked = idx[order]
        rank = np.empty(len(idx), np.int64)
        rank[order] = np.arange(len(idx)) - np.searchsorted(ranked, ranked, side="left")
        copy = s.seen[idx] + rank
        firsts = copy == 0
        s.first[idx[firsts]] = codes[firsts]
        np.add.at(s.seen, idx, 1)
        if self.full:
            for j in np.flatnonzero(copy >= s.counts[idx]):
                self.duplicate_count += 1
                if len(self.duplicates) < self.keep:
                    i = int(idx[j])
                    self.duplicates.append(
                        Duplicate(
                            split,
                            file,
                            int(indices[at[j]]),
                            int(copy[j]) + 1,
                            self._place(int(s.first[i])),
                            self._rows(s, i),
                        )
                    )
            for j in np.flatnonzero(~found):
                self.extra_count += 1
                if len(self.extras) < self.keep:
                    self.extras.append(
                        Extra(
                            split, file, int(indices[j]), records[j], bytes(d[j]).ljust(16, b"\0")
                        )
                    )

    def missing(self) -> tuple[list[Missing], int]:
        """Up to `keep` groups of source rows whose record is missing, and the number of rows
        missing in all."""
        out, total = [], 0
        for name, s in self._splits.items():
            short = np.flatnonzero(s.seen < s.counts)
            total += int((s.counts[short] - s.seen[short]).sum())
            for i in short[: max(self.keep - len(out), 0)]:
                out.append(
                    Missing(
                        name,
                        self._rows(s, int(i)),
                        int(s.seen[i]),
                        bytes(s.digests[i]).ljust(16, b"\0"),
                    )
                )
        return out, total
