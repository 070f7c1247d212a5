"""The split PTransforms: `AssignSplits` (the conversion's split stage) and `KeepSplit`."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad

__all__ = ["AssignSplits", "KeepSplit"]


@beam.typehints.with_input_types(TableBatch)
class _AssignDoFn(beam.DoFn):
    def __init__(self, conversion: Conversion) -> None:
        self._conversion = conversion

    def process(self, batch: TableBatch) -> Iterator:
        parts, bad = self._conversion.split(batch)
        count_bad("split", bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        yield from parts


@beam.typehints.with_input_types(TableBatch)
class AssignSplits(beam.PTransform):
    """TableBatch from the source -> TableBatch of one split each (main output `batches`): the
    conversion's split stage (transforms/convert.py); a row that cannot be hashed goes to the
    output tagged `bad` (a dead-letter dict)."""

    def __init__(self, conversion: Conversion) -> None:
        super().__init__()
        self._conversion = conversion

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        fn = _AssignDoFn(self._conversion)
        return batches | "Assign" >> beam.ParDo(fn).with_outputs(BAD_TAG, main="batches")


@beam.typehints.with_input_types(TableBatch)
@beam.typehints.with_output_types(TableBatch)
class KeepSplit(beam.PTransform):
    """The batches of one split (after AssignSplits)."""

    def __init__(self, split: str) -> None:
        super().__init__()
        self._split = split

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return batches | "Keep" >> beam.Filter(lambda b, s=self._split: b.split == s)
