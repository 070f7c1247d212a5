"""`EncodeSequences`: TableBatch -> one SequenceExample per group of rows, through spill files
(spill.py): only references to where a bucket's rows lie cross the GroupByKey. Its outputs are
those of `EncodeExamples` (records, or one output per split; stats; bad rows), so the sinks
take them as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad
from transforms.encode.beam import STATS_TAG, split_tag
from transforms.encode.records import BatchStats
from transforms.sequence.encode import STAGE, encode_groups
from transforms.sequence.spill import RowsRef, read_bucket, spill_batch
from transforms.write.grouped.spill import SpillWriter

__all__ = ["EncodeSequences"]


@beam.typehints.with_input_types(TableBatch)
@beam.typehints.with_output_types(tuple[tuple[int, int], RowsRef])
class _SpillRowsFn(beam.DoFn):
    """TableBatch -> ((split index, bucket), where the batch's rows of that bucket lie)."""

    def __init__(self, conversion: Conversion, temp_dir: str, buckets: int) -> None:
        self._conversion, self._temp_dir, self._buckets = conversion, temp_dir, buckets

    def start_bundle(self) -> None:
        self._spills: dict[str, SpillWriter] = {}
        self._out: list[tuple[tuple[int, int], RowsRef]] = []

    def process(self, batch: TableBatch) -> None:
        if batch.table.num_rows == 0:
            return
        names = [name for name, _ in self._conversion.splits]
        split = batch.split or names[0]
        if split not in self._spills:  # named by split: finalize_shards removes them
            self._spills[split] = SpillWriter(self._temp_dir, f"{split}-rows")
        layout = self._conversion.sequence
        refs = spill_batch(
            batch, layout.columns(), layout.options.group_by, self._buckets, self._spills[split]
        )
        index = names.index(split)
        self._out.extend(((index, bucket), ref) for bucket, ref in refs)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for spill in self._spills.values():  # references leave only once their files are whole
            spill.close()
        for element in self._out:
            yield WindowedValue(element, MIN_TIMESTAMP, [GlobalWindow()])
        self._out = []


@beam.typehints.with_input_types(tuple[tuple[int, int], Iterable[RowsRef]])
class _EncodeGroupsFn(beam.DoFn):
    """((split index, bucket), refs) -> the bucket's SequenceExamples (an EncodedBatch, on the
    split's output), BatchStats (tagged `stats`), bad rows (tagged `bad`)."""

    def __init__(self, conversion: Conversion) -> None:
        self._conversion = conversion

    def process(self, element: tuple[tuple[int, int], Iterable[RowsRef]]) -> Iterator:
        (index, bucket), refs = element
        conversion = self._conversion
        rows = read_bucket(list(refs))
        encoded, stats, bad = encode_groups(rows, conversion.sequence, conversion.framed)
        count_bad(STAGE, bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        name = conversion.splits[index][0]
        if encoded is not None:
            # The bucket is the writer's task: one bucket's records stay together.
            records = dataclasses.replace(encoded, task=bucket, first_row=bucket)
            if len(conversion.splits) == 1:
                yield records
            else:
                yield beam.pvalue.TaggedOutput(split_tag(name), records)
        split_rows = {name: stats.rows} if stats.rows else {}
        yield beam.pvalue.TaggedOutput(
            STATS_TAG, BatchStats(stats.rows, stats.nulls, split_rows, stats.steps)
        )


@beam.typehints.with_input_types(TableBatch)
class EncodeSequences(beam.PTransform):
    """TableBatch -> SequenceExamples of the grouped `sequence:` layout, with the outputs of
    `EncodeExamples`: main `records` (or `split_tag(name)` per split), `stats`, `bad`.

    Rows are spilled by (split, bucket) into `temp_dir` and each bucket is encoded on one
    worker: memory holds a bucket's rows (about `buckets` of the planned output each), not
    the input. A row's split is assigned before (by its key: AssignSplits)."""

    def __init__(self, conversion: Conversion, temp_dir: str, buckets: int) -> None:
        super().__init__()
        if conversion.sequence is None or not conversion.sequence.grouped:
            raise ValueError("EncodeSequences needs a grouped sequence layout")
        self._conversion, self._temp_dir, self._buckets = conversion, temp_dir, buckets

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        splits = self._conversion.splits
        tags = [split_tag(name) for name, _ in splits] if len(splits) > 1 else []
        spill = _SpillRowsFn(self._conversion, self._temp_dir, self._buckets)
        return (
            batches
            | "SpillRows" >> beam.ParDo(spill)  # ((split, bucket), RowsRef)
            | "GroupByBucket" >> beam.GroupByKey()  # ((split, bucket), [RowsRef])
            | "EncodeGroups"
            >> beam.ParDo(_EncodeGroupsFn(self._conversion)).with_outputs(
                STATS_TAG, BAD_TAG, *tags, main="records"
            )
        )
