"""JSON Lines files (`.jsonl`, `.jsonl.gz`) as Arrow batches through pyarrow's JSON reader,
their schema, and their bad lines.

Types follow the CSV rules: `columns.<name>.type` wins, the rest are inferred by pyarrow from
the first `INFER_BYTES` of the first file, then fixed for every file and block (a field with no
value there is read as text). Blank lines are skipped; rows are numbered from 0 over the
other lines; a large local file is read as byte ranges at line starts, each knowing its first
row and line number (transforms/read/delimited/ranges.py). pyarrow fails a whole block on a
line that is not JSON, a value that does not convert or a field that is not a column: the file
is then read again line by line from the first row not yet passed on, and the lines parsed a
batch at a time by the same reader, a batch that fails being split until each bad line stands
alone (transforms/deadletter.py). A bad line goes to the dead-letter output with its line
number and text.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from transforms.batch import TableBatch, source_rows
from transforms.deadletter import BadSink, isolate_bad_rows
from transforms.encode.schema import ConversionError
from transforms.fs import CompressionTypes, FileSystems
from transforms.read.delimited.ranges import TextRange, check_rows, open_range
from transforms.read.files import InputError, open_input

__all__ = [
    "BLOCK_BYTES",
    "INFER_BYTES",
    "NoLinesError",
    "json_batches",
    "json_schema",
    "parse_lines",
]

INFER_BYTES = 16 << 20  # how much of the first file type inference reads (as CSV's default)
BLOCK_BYTES = 4 << 20  # the reader's block size
_BLANK = b" \t\r\n"


class NoLinesError(InputError):
    """A JSON Lines file with no line (empty, or blank lines only): no rows and no fields."""


def _open(
    path: str, parse: pajson.ParseOptions, block: int, span: TextRange | None = None
) -> pajson.JSONStreamingReader:
    source = open_input(path) if span is None else open_range(path, span)
    return pajson.open_json(
        source, read_options=pajson.ReadOptions(block_size=block), parse_options=parse
    )


def json_schema(path: str, types: Mapping[str, pa.DataType]) -> pa.Schema:
    """Field types of the JSON Lines file: configured ones (`types`, first), the rest inferred
    by pyarrow from its first `INFER_BYTES`, in the order the file names them. NoLinesError
    when the file has no line."""
    explicit = pa.schema(types) if types else None
    parse = pajson.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
    try:
        inferred = _open(path, parse, INFER_BYTES).schema
    except pa.ArrowInvalid:  # a bad line in the sample: inferred from the other lines
        inferred = _good_lines_schema(path, explicit)
    except (OSError, EOFError) as err:
        raise InputError(f"{path}: cannot read as JSON Lines: {err}") from err
    # A field with no value in the sample has type null: read it as text.
    return pa.schema(
        [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in inferred]
    )


_KINDS = re.compile(r"Column\(/([^)]*)\) changed from")


def _good_lines_schema(path: str, explicit: pa.Schema | None) -> pa.Schema:
    """The types pyarrow infers from the sample's lines that read alone (the others are bad
    rows at run time). pyarrow reads a field as one JSON kind: a field that is a number in one
    line and text in another fails here unless its type is configured (then the lines of the
    other kind are the bad ones)."""
    lines, numbers, size = [], [], 0
    with _raw(path) as f:
        for number, line in enumerate(iter(f.readline, b""), start=1):
            if size >= INFER_BYTES:
                break
            size += len(line)
            if line.strip(_BLANK):
                lines.append(line.rstrip(b"\r\n"))
                numbers.append(number)
    if not lines:
        raise NoLinesError(f"{path}: no line of JSON (an empty file, or blank lines only)")
    sample = TableBatch(_lines_table(lines, numbers), path, 0)
    try:
        table, _ = isolate_bad_rows(sample, lambda b: parse_lines(b, explicit, "infer"), "read")
    except ConversionError as err:
        kinds = _KINDS.search(str(err))
        hint = f" (set columns.{kinds.group(1)}.type)" if kinds else ""
        raise InputError(f"{path}: cannot infer the types of the JSON Lines{hint}: {err}") from err
    if table is None:
        why = f"; line {numbers[0]}: {_explain(lines[0], explicit, 'infer')[1]}" if lines else ""
        raise InputError(
            f"{path}: no line of its first {INFER_BYTES:,} bytes reads as JSON Lines{why}"
        )
    return table.schema


def _lines_table(lines: list[bytes], numbers: list[int]) -> pa.Table:
    return pa.table(
        {
            "line": pa.array(numbers, pa.int64()),
            "text": pa.array(lines, pa.binary()),  # as in the file (the reader checks UTF-8)
        }
    )


def _explain(text: bytes, schema: pa.Schema | None, unexpected: str) -> tuple[str | None, str]:
    """Why one line does not read into `schema`: (the column at fault or None, the reason)."""
    try:
        alone = pajson.read_json(io.BytesIO(text))
    except pa.ArrowInvalid as err:
        return None, f"not valid JSON Lines: {err}"
    if alone.num_rows != 1:
        return None, f"{alone.num_rows} JSON values on one line"
    if schema is None:
        return None, "does not read with the lines before it"
    for name in alone.column_names:
        if name not in schema.names:
            if unexpected == "infer":
                continue
            return name, (
                "not a column of the input (the columns come from the first file; set "
                f"columns.{name}.type to add one)"
            )
        field = schema.field(name)
        one = pajson.ParseOptions(
            explicit_schema=pa.schema([field]), unexpected_field_behavior="ignore"
        )
        try:
            pajson.read_json(io.BytesIO(text), parse_options=one)
        except pa.ArrowInvalid:
            value = alone.column(name).to_pylist()[0]
            return name, f"cannot convert {value!r} to {field.type} (set columns.{name}.type)"
    return None, "does not read as a row of the input"


def parse_lines(lines: TableBatch, schema: pa.Schema | None, unexpected: str = "error") -> pa.Table:
    """The rows of a batch of JSON lines (a table of `line` numbers and `text`) in `schema`
    (None: inferred; `unexpected`: what a field not in it does, "error" or "infer"); raises
    ConversionError naming the file, the row, the line and the column of a line that does not
    read (the reason in full for a batch of one line)."""
    text = lines.table.column("text")
    data = b"\n".join(text.to_pylist())
    parse = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected)
    try:
        table = pajson.read_json(io.BytesIO(data), parse_options=parse)
        if table.num_rows == lines.table.num_rows:
            return table
        problem = f"{table.num_rows} rows from {lines.table.num_rows} lines"
    except pa.ArrowInvalid as err:
        problem = str(err)
    if lines.table.num_rows != 1:
        raise ConversionError(f"{lines.source}: rows from {lines.first_row}: {problem}")
    row = int(source_rows(lines)[0])
    number = lines.table.column("line")[0].as_py()
    column, reason = _explain(text[0].as_py(), schema, unexpected)
    where = f"row {row}: column {column!r}" if column else f"row {row}"
    raise ConversionError(f"{lines.source}: {where}: line {number}: {reason}")


def _raw(path: str, span: TextRange | None = None) -> IO[bytes]:
    if span is not None:
        return open_range(path, span)
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)


def _line_batches(
    path: str, skip: int, batch_rows: int, span: TextRange | None = None, seen: list | None = None
) -> Iterator[tuple[int, pa.Table]]:
    """The file's (or its range's) non-blank lines after the first `skip`, as (first row,
    table of line numbers and text) of at most `batch_rows` lines; the rows in all appended
    to `seen` at the end."""
    lines: list[bytes] = []
    numbers: list[int] = []
    row = first = 0
    with _raw(path, span) as f:
        start = 1 if span is None else span.first_line
        for number, line in enumerate(iter(f.readline, b""), start=start):
            if not line.strip(_BLANK):
                continue
            if row >= skip:
                if not lines:
                    first = row
                lines.append(line.rstrip(b"\r\n"))
                numbers.append(number)
                if len(lines) == batch_rows:
                    yield first, _lines_table(lines, numbers)
                    lines, numbers = [], []
            row += 1
    if lines:
        yield first, _lines_table(lines, numbers)
    if seen is not None:
        seen.append(row)


def _bad_lines(
    path: str,
    first_row: int,
    skip: int,
    schema: pa.Schema,
    batch_rows: int,
    on_bad: BadSink,
    span: TextRange | None = None,
) -> Iterator[TableBatch]:
    """The rows from the `skip`th on, line by line; the lines that do not read go to `on_bad`."""
    seen: list[int] = []
    for first, table in _line_batches(path, skip, batch_rows, span, seen):
        lines = TableBatch(table, path, first_row + first)
        converted, bad = isolate_bad_rows(lines, lambda b: parse_lines(b, schema), "read")
        for row in bad:
            on_bad(row)
        if converted is not None:
            kept = np.isin(source_rows(lines), [r["row"] for r in bad], invert=True)
            yield TableBatch(converted, path, lines.first_row, source_rows(lines)[kept])
    check_rows(path, span, seen[0])


def _raise_first(row: dict) -> None:
    raise ConversionError(row["reason"])


def json_batches(
    path: str,
    first_row: int,
    schema: pa.Schema,
    batch_rows: int,
    on_bad: BadSink | None,
    span: TextRange | None = None,
) -> Iterator[TableBatch]:
    """A JSON Lines file's batches in `schema` (or its range `span`'s, whose first row is
    `first_row`); with `on_bad`, its bad lines go there instead of failing the read (without,
    the first one raises ConversionError naming it)."""
    parse = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    yielded = 0
    try:
        for batch in _open(path, parse, BLOCK_BYTES, span):
            for start in range(0, batch.num_rows, batch_rows):
                part = pa.Table.from_batches([batch.slice(start, batch_rows)])
                yield TableBatch(part, path, first_row + yielded)
                yielded += part.num_rows
        check_rows(path, span, yielded)
        return
    except pa.ArrowInvalid:  # a bad line (or a file that is not JSON Lines): read line by line
        pass
    except (pa.ArrowException, OSError, EOFError) as err:
        raise InputError(f"{path}: after data row {first_row + yielded}: {err}") from err
    sink = on_bad if on_bad is not None else _raise_first
    yield from _bad_lines(path, first_row, yielded, schema, batch_rows, sink, span)
