"""Parquet files as Arrow batches: one work item per row group, read with pyarrow."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.batch import TableBatch
from transforms.read.files import InputError, open_input

__all__ = ["parquet_batches", "parquet_file"]


def parquet_file(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(open_input(path))
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: cannot read as Parquet: {err}") from err


def parquet_batches(
    path: str, row_group: int, first_row: int, batch_rows: int
) -> Iterator[TableBatch]:
    """The rows of one row group as batches of at most `batch_rows` rows."""
    first = first_row
    batches = parquet_file(path).iter_batches(
        batch_size=batch_rows, row_groups=[row_group], use_threads=False
    )
    try:
        for batch in batches:
            for start in range(0, batch.num_rows, batch_rows):
                part = batch.slice(start, batch_rows)
                table = pa.Table.from_batches([part])
                yield TableBatch(table=table, source=path, first_row=first)
                first += part.num_rows
    except (pa.ArrowException, OSError, EOFError) as err:
        raise InputError(f"{path}: after data row {first}: {err}") from err
