"""Arrow batch -> serialized tf.train.Example records (plain function + thin PTransform)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.columns import to_kernel_column
from transforms.example_kernel import encode_records
from transforms.read import TableBatch
from transforms.schema import FeatureSpec

__all__ = ["BatchStats", "EncodeExamples", "EncodedBatch", "MergeStats", "encode_table"]

STATS_TAG = "stats"


@dataclasses.dataclass(frozen=True)
class EncodedBatch:
    """Records of one batch: record i is buffer[offsets[i]:offsets[i+1]] (framed or not)."""

    buffer: np.ndarray
    offsets: np.ndarray
    framed: bool

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


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """Counts a batch contributes to the manifest."""

    rows: int
    nulls: dict[str, int]

    def merge(self, other: BatchStats) -> BatchStats:
        nulls = dict(self.nulls)
        for name, count in other.nulls.items():
            nulls[name] = nulls.get(name, 0) + count
        return BatchStats(self.rows + other.rows, nulls)


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
    return EncodedBatch(buffer, offsets, framed), stats


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


class _EncodeDoFn(beam.DoFn):
    def __init__(self, specs: Sequence[FeatureSpec], framed: bool) -> None:
        self._specs = list(specs)
        self._framed = framed

    def process(self, batch: TableBatch) -> Iterator:
        encoded, stats = encode_table(
            batch.table, self._specs, batch.source, batch.first_row, self._framed, batch.rows
        )
        yield encoded
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class EncodeExamples(beam.PTransform):
    """TableBatch -> EncodedBatch (main output) and BatchStats (output tagged `stats`)."""

    def __init__(self, specs: Sequence[FeatureSpec], framed: bool = False) -> None:
        super().__init__()
        self._specs = list(specs)
        self._framed = framed

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return batches | "Encode" >> beam.ParDo(
            _EncodeDoFn(self._specs, self._framed)
        ).with_outputs(STATS_TAG, main="records")
