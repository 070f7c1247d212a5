"""The element every step passes on: a `TableBatch` (rows of one source file, as Arrow), and
the helpers that keep its rows' source row numbers when rows are taken out."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

__all__ = ["TableBatch", "source_rows", "take_rows"]


@dataclasses.dataclass(frozen=True)
class TableBatch:
    """The element that flows between steps: rows of one source file, as Arrow.

    `rows`: the source row of each row, once a step has dropped rows; None while the rows are
    contiguous from `first_row`.
    """

    table: pa.Table
    source: str
    first_row: int
    rows: np.ndarray | None = dataclasses.field(default=None, compare=False)
    task: int = 0  # the ReadTask it came from (the writer keeps a task's rows together)
    split: str | None = None  # set once splits are assigned before preprocessing


def source_rows(batch: TableBatch) -> np.ndarray:
    """The source row of each row of the batch."""
    if batch.rows is not None:
        return np.asarray(batch.rows, dtype=np.int64)
    return np.arange(batch.first_row, batch.first_row + batch.table.num_rows, dtype=np.int64)


def take_rows(batch: TableBatch, indices: np.ndarray) -> TableBatch:
    """The rows `indices` of the batch, keeping their source row numbers."""
    indices = np.asarray(indices, dtype=np.int64)
    table = batch.table.take(pa.array(indices, pa.int64()))
    return dataclasses.replace(batch, table=table, rows=source_rows(batch)[indices])
