"""Bad CSV rows: where pyarrow's reader skipped a row with the wrong number of fields, and
which rows of a block hold a value that does not convert to the column's type.

pyarrow reports neither the position of a skipped row nor the row of a value it cannot convert;
both are found here, only for a file that has such a row (good files never come here).
"""

from __future__ import annotations

import csv
import dataclasses
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.schema import ConversionError
from transforms.fs import CompressionTypes, FileSystems
from transforms.read.delimited.ranges import TextRange, open_range

__all__ = ["RowMap", "cast_columns", "invalid_record_rows"]


def _records(  # noqa: ANN202
    path: str,
    delimiter: str,
    quote_char: str | None,
    escape_char: str | None,
    part: TextRange | None = None,
):
    """The file's (or its range's: header line, then the range) non-empty records as Python's
    csv module splits them."""
    if part is None:
        raw = io.BufferedReader(
            _Readable(FileSystems.open(path, compression_type=CompressionTypes.AUTO))
        )
    else:
        raw = open_range(path, part)
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
    quoting = csv.QUOTE_MINIMAL if quote_char else csv.QUOTE_NONE
    reader = csv.reader(
        text,
        delimiter=delimiter,
        quotechar=quote_char or None,
        escapechar=escape_char or None,
        quoting=quoting,
        doublequote=True,
        strict=False,
    )
    with text:
        for record in reader:
            if record:
                yield record


class _Readable(io.RawIOBase):
    """A stream with only `read` (Beam's CompressedFile, for a .csv.gz: it lacks the methods
    io.TextIOWrapper asks for) as a raw binary stream."""

    def __init__(self, stream) -> None:  # noqa: ANN001
        super().__init__()
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        view = memoryview(buffer).cast("B")
        data = self._stream.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


def invalid_record_rows(
    path: str,
    delimiter: str,
    quote_char: str | None,
    escape_char: str | None,
    num_columns: int,
    skip_first: bool,
    part: TextRange | None = None,
) -> tuple[np.ndarray, int]:
    """The data-row numbers of the records without `num_columns` fields, and the number of
    data rows (records after the header, when `skip_first`), counted from the file's (or the
    range's) first data row."""
    bad, total = [], 0
    for i, record in enumerate(_records(path, delimiter, quote_char, escape_char, part)):
        if i == 0 and skip_first:
            continue
        if len(record) != num_columns:
            bad.append(total)
        total += 1
    return np.asarray(bad, dtype=np.int64), total


@dataclasses.dataclass
class RowMap:
    """Source row numbers of the rows a reader yields, when it skipped invalid rows.

    Before any invalid row is seen the rows are contiguous (`rows()` gives None). `invalid`:
    the data-row numbers of every invalid row of the file, once known.
    """

    invalid: np.ndarray | None = None
    total: int = 0
    good: int = 0  # rows yielded so far
    reported: int = 0  # invalid rows reported so far
    offset: int = 0  # the first data row of what is read (a range of a file: not 0)

    def rows(self, n: int) -> np.ndarray | None:
        """The source rows of the next `n` good rows (None while no row was skipped)."""
        if self.invalid is None or self.invalid.size == 0:
            self.good += n
            return None
        kept = np.delete(np.arange(self.total, dtype=np.int64), self.invalid)
        out = kept[self.good : self.good + n] + self.offset
        self.good += n
        return out

    def next_invalid(self) -> int | None:
        """The data-row number of the next invalid row (None if the scan disagrees)."""
        k = self.reported
        self.reported += 1
        if self.invalid is None or k >= self.invalid.size:
            return None
        return int(self.invalid[k]) + self.offset


def cast_columns(table: pa.Table, schema: pa.Schema, source: str, rows: np.ndarray) -> pa.Table:
    """A table of text columns converted to `schema`'s types; raises ConversionError naming the
    column (and the row, for a one-row table) of a value that does not convert."""
    columns = []
    for field in schema:
        column = table.column(field.name)
        try:
            columns.append(pc.cast(column, field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            row = int(rows[0]) if len(rows) == 1 else "?"
            value = column[0].as_py() if len(column) == 1 else None
            raise ConversionError(
                f"{source}: row {row}: column {field.name!r}: cannot convert {value!r} to "
                f"{field.type} (set csv.column_types.{field.name})"
            ) from err
    return pa.Table.from_arrays(columns, schema=schema)
