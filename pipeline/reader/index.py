"""Random access to an output written with `--index`: record i of a split in one seek and one
read, without TensorFlow.

    from pipeline.reader.index import RecordIndex, read_record
    row = read_record("out", "train", 12345)        # {"fare": np.float64(...), ...}
    records = RecordIndex("out", "train")            # keeps the indexes and the files open
    len(records); records[7]; records.batch([3, 99, 12])   # a batch, as iter_batches gives one

A split's records are numbered across its shards in the manifest's order (the numbering of
iter_batches' partitions). The record's shard comes from the manifest's row counts; its place
from the shard's index file (transforms/write/index.py), read once per shard: for an
uncompressed shard the frame's offset and size, for gzip the member that holds it (read and
inflated whole: about 32 KiB of records; the last member read is kept, so neighbours cost no
second read). Both crcs of the frame are checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np
from isal import isal_zlib

from pipeline.output.dataset import read_output_manifest
from pipeline.output.entries import entry
from pipeline.reader.arrays import Layout, Ragged, decode_batch
from pipeline.reader.records import CorruptShardError, RecordBlock
from transforms import fs
from transforms.write.frames import OK, frames_of
from transforms.write.index import parse_index

__all__ = ["RecordIndex", "read_record"]


class RecordIndex:
    """A split's records by number: `len`, `[i]` (one row: numpy values, a ragged value as an
    array), `batch(indices)` (a batch as iter_batches gives it), `record(i)` (the bytes)."""

    def __init__(
        self,
        output: str,
        split: str = "train",
        columns: Sequence[str] | None = None,
        null_masks: bool = True,
    ) -> None:
        manifest = read_output_manifest(output)
        if split not in manifest.splits:
            raise ValueError(
                f"{output}: split {split!r} is not in the manifest "
                f"(splits: {sorted(manifest.splits)})"
            )
        shards = manifest.splits[split].shards
        if not shards or any(s.index is None for s in shards):
            raise ValueError(
                f"{output}: split {split!r} has no index files (the output was written "
                "without --index); iter_batches reads it in order"
            )
        if any(s.rows is None for s in shards):
            raise ValueError(f"{output}: the manifest does not count each shard's records")
        self.output, self.split = output, split
        self.compression = manifest.compression
        self._paths = [entry(output, s.file) for s in shards]
        self._index_paths = [entry(output, s.index, key="index") for s in shards]
        self._ends = np.cumsum([s.rows for s in shards])
        self._indexes: dict[int, np.ndarray] = {}
        self._files: dict[int, BinaryIO] = {}
        self._member: tuple[int, int, bytes] | None = None  # (shard, member offset, inflated)
        self._layout = Layout(manifest, columns, null_masks)

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def _locate(self, i: int) -> tuple[int, int]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"record {i} of split {self.split!r}: it has {len(self)} records")
        i %= len(self)
        shard = int(np.searchsorted(self._ends, i, side="right"))
        first = 0 if shard == 0 else int(self._ends[shard - 1])
        return shard, i - first

    def _index(self, shard: int) -> np.ndarray:
        rows = self._indexes.get(shard)
        if rows is None:
            path = self._index_paths[shard]
            with fs.open_read(path) as f:
                try:
                    rows = parse_index(f.read(), path, self.compression)
                except ValueError as err:
                    raise CorruptShardError(str(err)) from err
            expected = int(self._ends[shard] - (self._ends[shard - 1] if shard else 0))
            if rows.shape[0] != expected:
                raise CorruptShardError(
                    f"{path}: {rows.shape[0]} entries, the manifest counts {expected} records"
                )
            rows = self._indexes[shard] = rows
        return rows

    def _read(self, shard: int, offset: int, size: int) -> bytes:
        f = self._files.get(shard)
        if f is None:
            f = self._files[shard] = fs.open_read(self._paths[shard])
        if hasattr(f, "fileno") and fs.is_local(self._paths[shard]):
            data = os.pread(f.fileno(), size, offset)
        else:
            f.seek(offset)
            data = f.read(size)
        if len(data) != size:
            raise CorruptShardError(
                f"{self._paths[shard]}: bytes {offset}-{offset + size} are past its end"
            )
        return data

    def record(self, i: int) -> bytes:
        """The serialized record i (its data, the frame's crcs checked)."""
        shard, local = self._locate(i)
        row = self._index(shard)[local]
        if self.compression == "gzip":
            member_at, member_size, offset, size = (int(v) for v in row)
            if self._member is None or self._member[:2] != (shard, member_at):
                raw = self._read(shard, member_at, member_size)
                self._member = (shard, member_at, isal_zlib.decompress(raw, wbits=31))
            frame = self._member[2][offset : offset + size]
        else:
            offset, size = (int(v) for v in row)
            frame = self._read(shard, offset, size)
        buf = np.frombuffer(frame, np.uint8)
        _, starts, stops, states, end, _ = frames_of(buf)
        if len(starts) != 1 or states[0] != OK or end != len(frame):
            raise CorruptShardError(
                f"{self._paths[shard]}: record {local}: the index points at no whole record "
                "(a crc does not match, or the index is not this shard's)"
            )
        return frame[int(starts[0]) : int(stops[0])]

    def batch(self, indices: Sequence[int]) -> dict[str, Any]:
        """The records `indices`, in that order, as one batch (see pipeline/reader/arrays.py)."""
        records = [self.record(int(i)) for i in indices]
        sizes = np.array([len(r) for r in records], np.int64)
        stops = np.cumsum(sizes)
        buffer = np.frombuffer(b"".join(records), np.uint8)
        block = RecordBlock(buffer, stops - sizes, stops)
        return decode_batch(block, self._layout, f"split {self.split}")

    def __getitem__(self, i: int) -> dict[str, Any]:
        return _row(self.batch([i]))

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}

    def __enter__(self) -> RecordIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row(batch: dict[str, Any]) -> dict[str, Any]:
    """The one row of a batch of one: numpy scalars and arrays, a ragged value an array."""
    return {k: v.rows()[0] if isinstance(v, Ragged) else v[0] for k, v in batch.items()}


def read_record(output: str, split: str, i: int, columns: Sequence[str] | None = None) -> dict:
    """Row i of the split (see RecordIndex; one call opens the index: keep a RecordIndex to read
    many)."""
    with RecordIndex(output, split, columns) as records:
        return records[i]
