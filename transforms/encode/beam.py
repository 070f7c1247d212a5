"""`EncodeExamples`: TableBatch -> EncodedBatch per split, BatchStats, and the rows that cannot
be encoded; `MergeStats` sums the stats for the manifest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad
from transforms.encode.records import BatchStats

__all__ = ["STATS_TAG", "TABLES_TAG", "EncodeExamples", "MergeStats", "split_tag"]

STATS_TAG = "stats"
TABLES_TAG = "tables"


class MergeStats(beam.CombineFn):
    """BatchStats -> their sum (the manifest's row, split and null counts)."""

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


@beam.typehints.with_input_types(TableBatch)
class _EncodeDoFn(beam.DoFn):
    """TableBatch -> EncodedBatch per split, BatchStats (tagged `stats`), bad rows (`bad`),
    and with `tables`, (split, TableBatch) of the encoded rows (tagged `tables`)."""

    def __init__(self, conversion: Conversion, tables: bool = False) -> None:
        self._conversion = conversion
        self._tables = tables

    def process(self, batch: TableBatch) -> Iterator:
        encoded, bad = self._conversion.encode(batch)
        count_bad("encode", bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        if encoded is None:
            return
        splits = self._conversion.splits
        for name, records in encoded.by_split(splits):
            if len(splits) == 1:
                yield records
            else:
                yield beam.pvalue.TaggedOutput(split_tag(name), records)
        stats = encoded.stats
        yield beam.pvalue.TaggedOutput(
            STATS_TAG, BatchStats(stats.rows, stats.nulls, encoded.split_rows(splits), stats.steps)
        )
        if self._tables:
            for part in encoded.batches_by_split(splits):
                yield beam.pvalue.TaggedOutput(TABLES_TAG, part)


@beam.typehints.with_input_types(TableBatch)
class EncodeExamples(beam.PTransform):
    """TableBatch -> EncodedBatch (main output `records`; with several splits, one output per
    split, `split_tag(name)`), BatchStats (tagged `stats`) and the rows that cannot be encoded
    (tagged `bad`, dead-letter dicts; the batch is encoded without them).

    The encoding and the split of each record are the conversion's encode stage
    (transforms/convert.py): a batch whose `split` is set goes to that split whole; otherwise
    each record goes to the split its key column (or its own bytes) hashes to.
    """

    def __init__(self, conversion: Conversion, tables: bool = False) -> None:
        super().__init__()
        self._conversion = conversion
        self._tables = tables

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        splits = self._conversion.splits
        tags = [split_tag(name) for name, _ in splits] if len(splits) > 1 else []
        return batches | "Encode" >> beam.ParDo(
            _EncodeDoFn(self._conversion, self._tables)
        ).with_outputs(STATS_TAG, BAD_TAG, TABLES_TAG, *tags, main="records")
