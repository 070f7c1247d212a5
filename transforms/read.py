"""Parquet and CSV sources as Arrow batches, on any Beam filesystem.

Work is split at construction: one work item per Parquet row group, one per CSV file. Each
work item yields `TableBatch`es of at most `batch_rows` rows, tagged with the source file and
the 0-based index of their first data row in that file (for error messages).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.csv_bad_rows import RowMap, cast_columns, invalid_record_rows
from transforms.deadletter import (
    BAD_TAG,
    bad_row,
    count_bad,
    isolate_bad_rows,
    source_rows,
)
from transforms.schema import ConversionError, SchemaError

__all__ = [
    "CsvOptions",
    "InputError",
    "ReadTable",
    "ReadTask",
    "TableBatch",
    "WorkItem",
    "detect_format",
    "input_schema",
    "match_inputs",
    "plan_work",
    "read_work_item",
]


class InputError(ValueError):
    """An input that cannot be read: the message names the file."""


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

    def arrow_types(self) -> dict[str, pa.DataType]:
        out = {}
        for name, alias in self.column_types.items():
            try:
                out[name] = pa.type_for_alias(str(alias))
            except (ValueError, KeyError) as err:
                raise SchemaError(f"csv.column_types.{name}: unknown type {alias!r}") from err
        return out


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


@dataclasses.dataclass(frozen=True)
class WorkItem:
    path: str
    row_group: int | None  # None: the whole file (CSV)
    first_row: int
    num_rows: int | None = None  # a row group's rows (None for CSV: not known before reading)
    source_bytes: int = 0  # a row group's uncompressed bytes, a CSV file's size on disk


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """Work items one worker reads in order, in one go: the rows of one set of output shards
    (see transforms/shard_plan.py)."""

    index: int
    items: tuple[WorkItem, ...]


def _is_local(path: str) -> bool:
    return "://" not in path


def _open(path: str) -> IO[bytes] | str:
    """A local path as is (pyarrow memory-maps it, and decompresses .gz itself); else a stream."""
    if _is_local(path):
        return path
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)


def match_inputs(patterns: Sequence[str]) -> list[str]:
    """Every file the patterns (paths or globs, any Beam filesystem) name, sorted, deduplicated."""
    paths: list[str] = []
    for pattern in patterns:
        results = FileSystems.match([pattern])[0].metadata_list
        files = sorted(m.path for m in results if not m.path.endswith("/"))
        if not files:
            raise InputError(f"{pattern}: no file matches this input")
        paths.extend(files)
    return sorted(dict.fromkeys(paths))


def detect_format(paths: Sequence[str], fmt: str | None) -> str:
    if fmt:
        if fmt not in ("parquet", "csv"):
            raise InputError(f"format {fmt!r} is not one of parquet, csv")
        return fmt
    kinds = set()
    for path in paths:
        name = path.lower()
        if name.endswith((".parquet", ".parq", ".pq")):
            kinds.add("parquet")
        elif name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".txt.gz")):
            kinds.add("csv")
        else:
            raise InputError(f"{path}: cannot tell the format from the name; pass --format")
    if len(kinds) > 1:
        raise InputError(f"inputs mix formats {sorted(kinds)}; convert them in separate runs")
    return kinds.pop()


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
):
    try:
        return pacsv.open_csv(
            _open(path),
            read_options=_csv_read_options(opts, block),
            parse_options=_csv_parse_options(opts, invalid_row_handler),
            convert_options=_csv_convert_options(opts, types),
        )
    except (pa.ArrowException, OSError, EOFError) as err:
        located = None
        if types and invalid_row_handler is None:
            located = _locate_csv_error(path, opts, types, err)
        raise (located or InputError(f"{path}: cannot read as CSV: {err}")) from err


_CONVERSION_ERROR = re.compile(
    r"CSV column #(\d+): CSV conversion error to ([^:]+): invalid value '(.*)'"
)


def _locate_csv_error(
    path: str, opts: CsvOptions, types: Mapping[str, pa.DataType], err: Exception
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
    names = _csv_reader(path, opts, {}, 1 << 16, _skip).schema.names
    if index >= len(names):
        return None
    column = names[index]
    as_text = {name: pa.string() for name in names}
    row = 0
    for batch in _csv_reader(path, opts, as_text, opts.block_bytes, _skip):
        hits = pc.equal(batch.column(index), value)
        found = pc.index(hits, True).as_py()
        if found >= 0:
            return ConversionError(
                f"{path}: row {row + found}: column {column!r}: "
                f"cannot convert {value!r} to {type_name} (set csv.column_types.{column})"
            )
        row += batch.num_rows
    return None


def _csv_schema(path: str, opts: CsvOptions) -> pa.Schema:
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


def _parquet_file(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(_open(path))
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: cannot read as Parquet: {err}") from err


def _same_schema(a: pa.Schema, b: pa.Schema) -> str | None:
    """None when equal, else what differs first."""
    if a.names != b.names:
        return f"columns {a.names} vs {b.names}"
    for fa, fb in zip(a, b, strict=True):
        if fa.type != fb.type:
            return f"column {fa.name!r}: {fa.type} vs {fb.type}"
    return None


def input_schema(paths: Sequence[str], fmt: str, csv: CsvOptions) -> pa.Schema:
    """The one schema every input file agrees on; an error names two files that disagree."""
    if fmt == "parquet":
        schemas = [_parquet_file(p).schema_arrow for p in paths]
    else:
        first = _csv_schema(paths[0], csv)
        schemas = [first]
        for path in paths[1:]:
            names = _csv_reader(path, csv, {}, 1 << 16, _skip).schema.names
            schemas.append(
                first if names == first.names else pa.schema([(n, pa.null()) for n in names])
            )
    for path, schema in zip(paths[1:], schemas[1:], strict=True):
        diff = _same_schema(schemas[0], schema)
        if diff:
            raise SchemaError(f"{paths[0]} and {path} do not have the same schema: {diff}")
    return schemas[0].remove_metadata()


def plan_work(paths: Sequence[str], fmt: str) -> list[WorkItem]:
    """Parquet: one item per row group (the unit a worker reads); CSV: one item per file."""
    if fmt == "csv":
        sizes = {
            m.path: m.size_in_bytes for r in FileSystems.match(list(paths)) for m in r.metadata_list
        }
        return [WorkItem(p, None, 0, None, int(sizes.get(p, 0))) for p in paths]
    items = []
    for path in paths:
        meta = _parquet_file(path).metadata
        first = 0
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            if group.num_rows:  # an empty row group is no work
                items.append(WorkItem(path, rg, first, group.num_rows, int(group.total_byte_size)))
            first += group.num_rows
    return items


def _skip(_: Any) -> str:
    return "skip"


BadSink = Callable[[dict[str, Any]], None]


class _InvalidRows:
    """pyarrow's invalid_row_handler: skips a row with the wrong number of fields and reports
    it as a bad row with its data-row number (found by scanning the file once, on the first)."""

    def __init__(self, path: str, opts: CsvOptions, num_columns: int, on_bad: BadSink) -> None:
        self.path, self.opts, self.num_columns, self.on_bad = path, opts, num_columns, on_bad
        self.map = RowMap()
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
            )
        if self.ignore:
            self.ignore -= 1
            self.map.next_invalid()
            return "skip"
        reason = f"{row.actual_columns} fields where the header has {row.expected_columns}"
        number = self.map.next_invalid()
        self.on_bad(bad_row(self.path, number, None, reason, "read", {"text": row.text}))
        return "skip"


def _csv_batches(
    item: WorkItem,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None,
) -> Iterator[TableBatch]:
    """A CSV file's batches; with `on_bad`, its bad rows go there instead of failing the read.

    A value that does not convert makes pyarrow fail the whole block: the file is then read
    again as text from the first row not yet yielded, and converted column by column with
    Arrow's cast, the rows that do not convert going to `on_bad`.
    """
    types = {f.name: f.type for f in schema}
    invalid = None if on_bad is None else _InvalidRows(item.path, csv, len(schema), on_bad)
    yielded = 0
    try:
        for batch in _csv_reader(item.path, csv, types, csv.block_bytes, invalid):
            for start in range(0, batch.num_rows, batch_rows):
                part = pa.Table.from_batches([batch.slice(start, batch_rows)])
                rows = None if invalid is None else invalid.map.rows(part.num_rows)
                yield TableBatch(part, item.path, item.first_row + yielded, rows)
                yielded += part.num_rows
        return
    except (InputError, ConversionError) as err:  # the open failed
        if on_bad is None or not _CONVERSION_ERROR.search(str(err)):
            raise
    except (pa.ArrowException, OSError, EOFError) as err:
        if on_bad is None or not _CONVERSION_ERROR.search(str(err)):
            located = _locate_csv_error(item.path, csv, types, err) if on_bad is None else None
            after = f"after data row {item.first_row + yielded}"
            raise (located or InputError(f"{item.path}: {after}: {err}")) from err
    again = _InvalidRows(item.path, csv, len(schema), on_bad)
    again.ignore = invalid.map.reported
    again.map = dataclasses.replace(invalid.map, good=0, reported=0)
    as_text = {name: pa.string() for name in schema.names}
    skip = yielded
    for batch in _csv_reader(item.path, csv, as_text, csv.block_bytes, again):
        table = pa.Table.from_batches([batch])
        if skip:
            taken = min(skip, table.num_rows)
            again.map.rows(taken)
            table, skip = table.slice(taken), skip - taken
        for start in range(0, table.num_rows, batch_rows):
            part = table.slice(start, batch_rows)
            rows = again.map.rows(part.num_rows)
            text = TableBatch(part, item.path, item.first_row + yielded, rows)
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
                yield TableBatch(converted, item.path, text.first_row, source_rows(text)[kept])


def read_work_item(
    item: WorkItem,
    fmt: str,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None = None,
) -> Iterator[TableBatch]:
    """The rows of one work item, as batches of at most `batch_rows` rows in the input schema.

    With `on_bad`, a CSV row that cannot be read (wrong number of fields, a value that does not
    convert) is passed to it as a dead-letter dict; without, it fails the read.
    """
    if fmt == "csv":
        yield from _csv_batches(item, schema, csv, batch_rows, on_bad)
        return
    first = item.first_row
    batches = _parquet_file(item.path).iter_batches(
        batch_size=batch_rows, row_groups=[item.row_group], use_threads=False
    )
    try:
        for batch in batches:
            for start in range(0, batch.num_rows, batch_rows):
                part = batch.slice(start, batch_rows)
                table = pa.Table.from_batches([part])
                yield TableBatch(table=table, source=item.path, first_row=first)
                first += part.num_rows
    except (pa.ArrowException, OSError, EOFError) as err:
        raise InputError(f"{item.path}: after data row {first}: {err}") from err


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
