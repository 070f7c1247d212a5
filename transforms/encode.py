"""Arrow batch -> serialized tf.train.Example records (plain function + thin PTransform)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.columns import to_kernel_column
from transforms.deadletter import BAD_TAG, count_bad, isolate_bad_rows
from transforms.example_kernel import encode_records
from transforms.read import TableBatch
from transforms.schema import FeatureSpec
from transforms.split import assign_splits, partition_records

__all__ = [
    "BatchStats",
    "EncodeExamples",
    "EncodedBatch",
    "MergeStats",
    "concat_batches",
    "encode_table",
    "split_tag",
]

STATS_TAG = "stats"


@dataclasses.dataclass(frozen=True)
class EncodedBatch:
    """Records of one batch: record i is buffer[offsets[i]:offsets[i+1]] (framed or not).

    `task`, `source` and `first_row` say where the rows came from (the ReadTask, the file and
    its first row), so writers can keep a task's rows together and order blocks the same way
    on every run.
    """

    buffer: np.ndarray
    offsets: np.ndarray
    framed: bool
    task: int = 0
    source: str = ""
    first_row: int = 0

    @property
    def num_records(self) -> int:
        return len(self.offsets) - 1

    def records(self) -> list[bytes]:
        """One bytes object per record (for sinks that frame records themselves)."""
        n = self.num_records
        arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(self.offsets), pa.py_buffer(self.buffer)]
        )
        return arr.to_pylist()


def concat_batches(parts: Sequence[EncodedBatch]) -> EncodedBatch:
    """The records of several encoded batches as one, in their order (the origin fields are
    the first part's)."""
    if len(parts) == 1:
        return parts[0]
    buffer = np.concatenate([p.buffer[p.offsets[0] : p.offsets[-1]] for p in parts])
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for p in parts:
        offsets.append(p.offsets[1:] - p.offsets[0] + base)
        base += int(p.offsets[-1] - p.offsets[0])
    return dataclasses.replace(parts[0], buffer=buffer, offsets=np.concatenate(offsets))


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """Counts a batch contributes to the manifest."""

    rows: int
    nulls: dict[str, int]
    split_rows: dict[str, int] = dataclasses.field(default_factory=dict)

    def merge(self, other: BatchStats) -> BatchStats:
        nulls = dict(self.nulls)
        for name, count in other.nulls.items():
            nulls[name] = nulls.get(name, 0) + count
        split_rows = dict(self.split_rows)
        for name, count in other.split_rows.items():
            split_rows[name] = split_rows.get(name, 0) + count
        return BatchStats(self.rows + other.rows, nulls, split_rows)


def encode_table(
    table: pa.Table,
    specs: Sequence[FeatureSpec],
    source: str,
    first_row: int,
    framed: bool = False,
    rows: np.ndarray | None = None,
) -> tuple[EncodedBatch, BatchStats]:
    """Serialize every row of `table` as a tf.train.Example with the features `specs` describe.

    Raises ConversionError naming source, row and column for a value that cannot be written;
    the row is `first_row` + index, or `rows[index]` (the source rows, when rows were dropped).
    """
    columns = []
    nulls = {}
    for spec in specs:
        column, null_count = to_kernel_column(table, spec, source, first_row, rows)
        columns.append(column)
        nulls[spec.name] = null_count
    buffer, offsets = encode_records(columns, table.num_rows, framed=framed)
    stats = BatchStats(table.num_rows, nulls)
    return EncodedBatch(buffer, offsets, framed, source=source, first_row=first_row), stats


class MergeStats(beam.CombineFn):
    def create_accumulator(self) -> BatchStats:
        return BatchStats(0, {})

    def add_input(self, acc: BatchStats, stats: BatchStats) -> BatchStats:
        return acc.merge(stats)

    def merge_accumulators(self, accs: Iterable[BatchStats]) -> BatchStats:
        out = BatchStats(0, {})
        for acc in accs:
            out = out.merge(acc)
        return out

    def extract_output(self, acc: BatchStats) -> BatchStats:
        return acc


def split_tag(split: str) -> str:
    """The output of EncodeExamples that holds the records of `split` (with several splits)."""
    return f"records_{split}"


class _EncodeDoFn(beam.DoFn):
    def __init__(
        self,
        specs: Sequence[FeatureSpec],
        framed: bool,
        splits: Sequence[tuple[str, int]],
        key: str | None,
        salt: str,
    ) -> None:
        self._specs = list(specs)
        self._framed = framed
        self._splits = list(splits)
        self._key = key
        self._salt = salt

    def _encode(self, batch: TableBatch) -> tuple[EncodedBatch, BatchStats, np.ndarray | None]:
        encoded, stats = encode_table(
            batch.table, self._specs, batch.source, batch.first_row, self._framed, batch.rows
        )
        encoded = dataclasses.replace(encoded, task=batch.task)
        if len(self._splits) == 1 or batch.split is not None:
            return encoded, stats, None
        ids = assign_splits(
            [w for _, w in self._splits],
            self._salt,
            key=None if self._key is None else batch.table.column(self._key),
            buffer=encoded.buffer,
            offsets=encoded.offsets,
            framed=self._framed,
        )
        return encoded, stats, ids

    def process(self, batch: TableBatch) -> Iterator:
        result, bad = isolate_bad_rows(batch, self._encode, "encode")
        count_bad("encode", bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        if result is None:
            return
        encoded, stats, ids = result
        if len(self._splits) == 1:
            yield encoded
            split_rows = {self._splits[0][0]: stats.rows}
        elif ids is None:  # the split was assigned before preprocessing
            yield beam.pvalue.TaggedOutput(split_tag(batch.split), encoded)
            split_rows = {batch.split: stats.rows}
        else:
            parts = partition_records(encoded.buffer, encoded.offsets, ids, len(self._splits))
            split_rows = {}
            for (name, _), part in zip(self._splits, parts, strict=True):
                if part is not None:
                    records = dataclasses.replace(encoded, buffer=part[0], offsets=part[1])
                    split_rows[name] = records.num_records
                    yield beam.pvalue.TaggedOutput(split_tag(name), records)
        stats = BatchStats(stats.rows, stats.nulls, split_rows)
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class EncodeExamples(beam.PTransform):
    """TableBatch -> EncodedBatch (main output `records`; with several splits, one output per
    split, `split_tag(name)`), BatchStats (tagged `stats`) and the rows that cannot be encoded
    (tagged `bad`, dead-letter dicts; the batch is encoded without them).

    `splits`: (name, weight) pairs; a batch whose `split` is set (AssignSplits ran before
    preprocessing) goes to that split whole; otherwise each record goes to a split by
    `assign_splits` of the `key` column (or of its own bytes) with `salt`.
    """

    def __init__(
        self,
        specs: Sequence[FeatureSpec],
        framed: bool = False,
        splits: Sequence[tuple[str, int]] = (("train", 1),),
        key: str | None = None,
        salt: str = "",
    ) -> None:
        super().__init__()
        self._specs = list(specs)
        self._framed = framed
        self._splits = list(splits)
        self._key = key
        self._salt = salt

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        tags = [split_tag(name) for name, _ in self._splits] if len(self._splits) > 1 else []
        return batches | "Encode" >> beam.ParDo(
            _EncodeDoFn(self._specs, self._framed, self._splits, self._key, self._salt)
        ).with_outputs(STATS_TAG, BAD_TAG, *tags, main="records")
