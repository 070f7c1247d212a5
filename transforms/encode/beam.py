"""`EncodeExamples`: TableBatch -> EncodedBatch per split, BatchStats, the rows that cannot be
encoded and, with `statistics`, each split's feature statistics per bundle; `MergeStats` sums the
stats for the manifest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad
from transforms.encode.records import BatchStats
from transforms.stats.accumulator import StatisticsAccumulator

__all__ = ["STATISTICS_TAG", "STATS_TAG", "EncodeExamples", "MergeStats", "split_tag"]

STATS_TAG = "stats"
STATISTICS_TAG = "statistics"


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
    and with `statistics`, at the end of each bundle (split, SplitStats) of the rows it encoded
    (tagged `statistics`): accumulated here, batch by batch, so no batch crosses to another
    step for them."""

    def __init__(self, conversion: Conversion, statistics: bool = False) -> None:
        self._conversion = conversion
        self._statistics = statistics
        self._accumulator: StatisticsAccumulator | None = None

    def start_bundle(self) -> None:
        if self._statistics:
            self._accumulator = StatisticsAccumulator(self._conversion.specs)

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
        if self._accumulator is not None:
            for name, part in encoded.batches_by_split(splits):
                self._accumulator.add(name, part)

    def finish_bundle(self) -> Iterator:
        if self._accumulator is None:
            return
        accumulator, self._accumulator = self._accumulator, None
        for item in accumulator.items():
            yield beam.pvalue.TaggedOutput(
                STATISTICS_TAG, WindowedValue(item, MIN_TIMESTAMP, [GlobalWindow()])
            )


@beam.typehints.with_input_types(TableBatch)
class EncodeExamples(beam.PTransform):
    """TableBatch -> EncodedBatch (main output `records`; with several splits, one output per
    split, `split_tag(name)`), BatchStats (tagged `stats`) and the rows that cannot be encoded
    (tagged `bad`, dead-letter dicts; the batch is encoded without them); with `statistics`,
    (split, SplitStats) per split and bundle (tagged `statistics`: merge them per split).

    The encoding and the split of each record are the conversion's encode stage
    (transforms/convert.py): a batch whose `split` is set goes to that split whole; otherwise
    each record goes to the split its key column (or its own bytes) hashes to.
    """

    def __init__(self, conversion: Conversion, statistics: bool = False) -> None:
        super().__init__()
        self._conversion = conversion
        self._statistics = statistics

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        splits = self._conversion.splits
        tags = [split_tag(name) for name, _ in splits] if len(splits) > 1 else []
        return batches | "Encode" >> beam.ParDo(
            _EncodeDoFn(self._conversion, self._statistics)
        ).with_outputs(STATS_TAG, BAD_TAG, STATISTICS_TAG, *tags, main="records")
