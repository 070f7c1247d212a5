"""`ReadTable`: read tasks -> TableBatch elements, and the rows that cannot be read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from transforms.deadletter import BAD_TAG, count_bad
from transforms.read.delimited.reader import CsvOptions
from transforms.read.work import ReadTask, WorkItem, read_work_item

__all__ = ["ReadTable"]


@beam.typehints.with_input_types(ReadTask)
class _ReadDoFn(beam.DoFn):
    """ReadTask -> TableBatch (main output) and the rows that cannot be read (tagged `bad`)."""

    def __init__(self, fmt: str, schema: pa.Schema, csv: CsvOptions, batch_rows: int) -> None:
        self._args = (fmt, schema, csv, batch_rows)

    def process(self, task: ReadTask) -> Iterator:
        bad: list[dict[str, Any]] = []

        def flush() -> Iterator:
            count_bad("read", bad)
            for row in bad:
                yield beam.pvalue.TaggedOutput(BAD_TAG, row)
            bad.clear()

        for item in task.items:
            for batch in read_work_item(item, *self._args, on_bad=bad.append):
                yield from flush()
                yield dataclasses.replace(batch, task=task.index)
        yield from flush()


class ReadTable(beam.PTransform):
    """Files -> TableBatch elements, main output `batches` (ReadTasks, or one task per work
    item, then Reshuffle); the rows that cannot be read go to the output tagged `bad`."""

    def __init__(
        self,
        work: Sequence[WorkItem | ReadTask],
        fmt: str,
        schema: pa.Schema,
        csv: CsvOptions,
        batch_rows: int,
    ) -> None:
        super().__init__()
        self._work = [
            w if isinstance(w, ReadTask) else ReadTask(i, (w,)) for i, w in enumerate(work)
        ]
        self._fmt = fmt
        self._schema = schema
        self._csv = csv
        self._batch_rows = batch_rows

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        read = _ReadDoFn(self._fmt, self._schema, self._csv, self._batch_rows)
        return (
            pbegin
            | "Tasks" >> beam.Create(self._work)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(read).with_outputs(BAD_TAG, main="batches")  # TableBatch
        )
