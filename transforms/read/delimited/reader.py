"""CSV files as Arrow batches through pyarrow's streaming reader, their schema, and their bad rows.

A row with the wrong number of fields is skipped by pyarrow's invalid_row_handler and reported
with its data-row number; a value that does not convert makes pyarrow fail a whole block, so the
file is read again as text and converted column by column (transforms/read/delimited/bad_rows.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from transforms.batch import TableBatch, source_rows
from transforms.deadletter import BadSink, bad_row, isolate_bad_rows
from transforms.encode.schema import ConversionError, SchemaError
from transforms.read.delimited.bad_rows import RowMap, cast_columns, invalid_record_rows
from transforms.read.delimited.ranges import TextRange, check_rows, open_range
from transforms.read.files import InputError, open_input

__all__ = ["CsvOptions", "csv_batches", "csv_column_names", "csv_schema"]


@dataclasses.dataclass(frozen=True)
class CsvOptions:
    """pyarrow CSV reader settings, from the config's `csv:` section."""

    delimiter: str = ","
    quote_char: str = '"'
    escape_char: str | None = None
    header: bool = True
    column_names: tuple[str, ...] | None = None  # names when there is no header (or to rename)
    null_values: tuple[str, ...] = ("", "NULL", "null", "NaN", "nan", "N/A", "NA")
    column_types: Mapping[str, str] = dataclasses.field(default_factory=dict)  # name -> type
    infer_bytes: int = 16 << 20  # how much of the first file type inference reads
    block_bytes: int = 4 << 20  # the reader's block size
    # a local, uncompressed file past 1.5 x this is read as byte ranges of about this size, by
    # as many work items (transforms/read/delimited/ranges.py); 0: every file whole
    range_bytes: int = 64 << 20

    def arrow_types(self) -> dict[str, pa.DataType]:
        out = {}
        for name, alias in self.column_types.items():
            try:
                out[name] = pa.type_for_alias(str(alias))
            except (ValueError, KeyError) as err:
                raise SchemaError(f"csv.column_types.{name}: unknown type {alias!r}") from err
        return out


def _csv_read_options(opts: CsvOptions, block_bytes: int) -> pacsv.ReadOptions:
    return pacsv.ReadOptions(
        block_size=block_bytes,
        column_names=list(opts.column_names) if opts.column_names else None,
        skip_rows=1 if (opts.header and opts.column_names) else 0,
        autogenerate_column_names=False,
    )


def _csv_parse_options(
    opts: CsvOptions, invalid_row_handler: Callable | None = None
) -> pacsv.ParseOptions:
    return pacsv.ParseOptions(
        delimiter=opts.delimiter,
        quote_char=opts.quote_char or False,
        escape_char=opts.escape_char or False,
        newlines_in_values=True,
        invalid_row_handler=invalid_row_handler,
    )


def _csv_convert_options(
    opts: CsvOptions, types: Mapping[str, pa.DataType]
) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(
        column_types=dict(types),
        null_values=list(opts.null_values),
        strings_can_be_null=True,  # an unquoted empty cell is a null ...
        quoted_strings_can_be_null=False,  # ... a quoted "" is an empty string
    )


def _csv_reader(  # noqa: ANN202
    path: str,
    opts: CsvOptions,
    types: Mapping[str, pa.DataType],
    block: int,
    invalid_row_handler: Callable | None = None,
    part: TextRange | None = None,
    first_row: int = 0,
):
    """pyarrow's streaming reader of the file, or of its range `part` (its header line, then the
    range's bytes), whose first data row is `first_row`."""
    try:
        return pacsv.open_csv(
            open_input(path) if part is None else open_range(path, part),
            read_options=_csv_read_options(opts, block),
            parse_options=_csv_parse_options(opts, invalid_row_handler),
            convert_options=_csv_convert_options(opts, types),
        )
    except (pa.ArrowException, OSError, EOFError) as err:
        located = None
        if types and invalid_row_handler is None:
            located = _locate_csv_error(path, opts, types, err, part, first_row)
        raise (located or InputError(f"{path}: cannot read as CSV: {err}")) from err


_CONVERSION_ERROR = re.compile(
    r"CSV column #(\d+): CSV conversion error to ([^:]+): invalid value '(.*)'"
)


def _locate_csv_error(
    path: str,
    opts: CsvOptions,
    types: Mapping[str, pa.DataType],
    err: Exception,
    part: TextRange | None = None,
    first_row: int = 0,
) -> ConversionError | None:
    """Name the row and column of a CSV value pyarrow could not convert (it reports neither).

    Re-reads the file with every column as text and finds the first row holding the reported
    value in the reported column. Runs only after a failure, so costs nothing on good input.
    """
    match = _CONVERSION_ERROR.search(str(err))
    if not match:
        return None
    index, type_name, value = int(match.group(1)), match.group(2), match.group(3)
    # The file's columns (the index counts them), not the configured types: those may be a few.
    names = _csv_reader(path, opts, {}, 1 << 16, _skip, part).schema.names
    if index >= len(names):
        return None
    column = names[index]
    as_text = {name: pa.string() for name in names}
    row = first_row
    for batch in _csv_reader(path, opts, as_text, opts.block_bytes, _skip, part):
        hits = pc.equal(batch.column(index), value)
        found = pc.index(hits, True).as_py()
        if found >= 0:
            return ConversionError(
                f"{path}: row {row + found}: column {column!r}: "
                f"cannot convert {value!r} to {type_name} (set csv.column_types.{column})"
            )
        row += batch.num_rows
    return None


def csv_schema(path: str, opts: CsvOptions) -> pa.Schema:
    """Column types of the CSV: configured ones, the rest inferred from the first `infer_bytes`."""
    types = opts.arrow_types()
    try:
        schema = _csv_reader(path, opts, types, opts.infer_bytes, _skip).schema
    except (ConversionError, InputError) as err:
        if not _CONVERSION_ERROR.search(str(err)):
            raise
        # A configured column holds a bad value in the sample: its type is known anyway, and
        # the row goes to the dead-letter output at run time.
        as_text = {name: pa.string() for name in types}
        schema = _csv_reader(path, opts, as_text, opts.infer_bytes, _skip).schema
        schema = pa.schema([pa.field(f.name, types.get(f.name, f.type)) for f in schema])
    unknown = sorted(set(types) - set(schema.names))
    if unknown:
        raise SchemaError(f"csv.column_types names {unknown}, not columns of {path} {schema.names}")
    # A column with no value in the sample has type null: read it as text.
    fields = [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in schema]
    return pa.schema(fields)


def csv_column_names(path: str, opts: CsvOptions) -> list[str]:
    """The column names of a CSV file (its header, or the configured names)."""
    return _csv_reader(path, opts, {}, 1 << 16, _skip).schema.names


def _skip(_: Any) -> str:
    return "skip"


class _InvalidRows:
    """pyarrow's invalid_row_handler: skips a row with the wrong number of fields and reports
    it as a bad row with its data-row number (found by scanning the file once, on the first)."""

    def __init__(
        self,
        path: str,
        opts: CsvOptions,
        num_columns: int,
        on_bad: BadSink,
        part: TextRange | None = None,
        first_row: int = 0,
    ) -> None:
        self.path, self.opts, self.num_columns, self.on_bad = path, opts, num_columns, on_bad
        self.part = part
        self.map = RowMap(offset=first_row)
        self.ignore = 0  # invalid rows already reported by an earlier read of the file

    def __call__(self, row: Any) -> str:
        if self.map.invalid is None:
            opts = self.opts
            self.map.invalid, self.map.total = invalid_record_rows(
                self.path,
                opts.delimiter,
                opts.quote_char,
                opts.escape_char,
                self.num_columns,
                skip_first=opts.header,
                part=self.part,
            )
        if self.ignore:
            self.ignore -= 1
            self.map.next_invalid()
            return "skip"
        reason = f"{row.actual_columns} fields where the header has {row.expected_columns}"
        number = self.map.next_invalid()
        self.on_bad(bad_row(self.path, number, None, reason, "read", {"text": row.text}))
        return "skip"


def csv_batches(
    path: str,
    first_row: int,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None,
    span: TextRange | None = None,
) -> Iterator[TableBatch]:
    """A CSV file's batches (or its range `span`'s, whose first data row is `first_row`); with
    `on_bad`, its bad rows go there instead of failing the read.

    A value that does not convert makes pyarrow fail the whole block: the file is then read
    again as text from the first row not yet yielded, and converted column by column with
    Arrow's cast, the rows that do not convert going to `on_bad`.
    """
    types = {f.name: f.type for f in schema}
    invalid = (
        None if on_bad is None else _InvalidRows(path, csv, len(schema), on_bad, span, first_row)
    )
    yielded = 0
    try:
        for batch in _csv_reader(path, csv, types, csv.block_bytes, invalid, span, first_row):
            for start in range(0, batch.num_rows, batch_rows):
                part = pa.Table.from_batches([batch.slice(start, batch_rows)])
                rows = None if invalid is None else invalid.map.rows(part.num_rows)
                yield TableBatch(part, path, first_row + yielded, rows)
                yielded += part.num_rows
        check_rows(path, span, yielded + (0 if invalid is None else invalid.map.reported))
        return
    except (InputError, ConversionError) as err:  # the open failed
        if on_bad is None or not _CONVERSION_ERROR.search(str(err)):
            raise
    except (pa.ArrowException, OSError, EOFError) as err:
        if on_bad is None or not _CONVERSION_ERROR.search(str(err)):
            located = None
            if on_bad is None:
                located = _locate_csv_error(path, csv, types, err, span, first_row)
            after = f"after data row {first_row + yielded}"
            raise (located or InputError(f"{path}: {after}: {err}")) from err
    again = _InvalidRows(path, csv, len(schema), on_bad, span, first_row)
    again.ignore = invalid.map.reported
    again.map = dataclasses.replace(invalid.map, good=0, reported=0)
    as_text = {name: pa.string() for name in schema.names}
    skip = yielded
    for batch in _csv_reader(path, csv, as_text, csv.block_bytes, again, span, first_row):
        table = pa.Table.from_batches([batch])
        if skip:
            taken = min(skip, table.num_rows)
            again.map.rows(taken)
            table, skip = table.slice(taken), skip - taken
        for start in range(0, table.num_rows, batch_rows):
            part = table.slice(start, batch_rows)
            rows = again.map.rows(part.num_rows)
            text = TableBatch(part, path, first_row + yielded, rows)
            yielded += part.num_rows
            converted, bad = isolate_bad_rows(
                text,
                lambda b: cast_columns(b.table, schema, b.source, source_rows(b)),
                "read",
            )
            for row in bad:
                on_bad(row)
            if converted is not None:
                kept = np.isin(source_rows(text), [r["row"] for r in bad], invert=True)
                yield TableBatch(converted, path, text.first_row, source_rows(text)[kept])
    check_rows(path, span, yielded + again.map.reported)
