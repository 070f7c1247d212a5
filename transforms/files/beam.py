"""`ReadFiles`: the conversion's files stage (transforms/files/stage.py) as a PTransform."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad
from transforms.files.stage import STAGE

__all__ = ["ReadFiles"]


class _ReadFilesDoFn(beam.DoFn):
    """TableBatch -> its parts with the files read in; the rows whose files cannot be had
    (tagged `bad`)."""

    def __init__(self, conversion: Conversion) -> None:
        self._conversion = conversion

    def process(self, batch: TableBatch) -> Iterator:
        for part, bad in self._conversion.read_files(batch):
            count_bad(STAGE, bad)
            for row in bad:
                yield beam.pvalue.TaggedOutput(BAD_TAG, row)
            if part is not None:
                yield part


@beam.typehints.with_input_types(TableBatch)
class ReadFiles(beam.PTransform):
    """TableBatch -> TableBatch (main output `batches`) with the conversion's `files:` columns
    read in, a part of bounded size at a time; the rows whose files cannot be had go to the
    output tagged `bad` (dead-letter dicts)."""

    def __init__(self, conversion: Conversion) -> None:
        super().__init__()
        if conversion.files is None:
            raise ValueError("ReadFiles needs a conversion with files: columns")
        self._conversion = conversion

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return batches | "Read" >> beam.ParDo(_ReadFilesDoFn(self._conversion)).with_outputs(
            BAD_TAG, main="batches"
        )
