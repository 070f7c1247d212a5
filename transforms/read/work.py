"""Work items (a Parquet row group, a whole Parquet file, a CSV or JSON Lines file, a byte range
of a large CSV file) and read tasks: the units workers read.

Work is split at construction: one work item per Parquet row group (from the footers the plan
reads once, for the schema too), one per CSV or JSON Lines file; a large local, uncompressed
CSV or JSON Lines file is cut into byte ranges at row starts (`cut_text_files`), one item
each. With very many Parquet files the plan reads one footer only (pipeline/job/plan.py): one
work item per whole file (`plan_whole_files`), whose reader finds the row groups and checks the
file's schema. A file of a Hive-partitioned input carries its partition values
(transforms/read/partitions.py), which the reader appends to each batch. A CSV or JSON Lines
table of file references (`files:`) is cut by rows (`cut_reference_tables`): each of its rows
costs a file read, so its rows, not its bytes on disk, are the work, and one file would keep the
other workers idle. Each work item yields `TableBatch`es of at most `batch_rows` rows, tagged with
the source file and the 0-based index of their first data row in that file (for error
messages).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.batch import TableBatch, source_rows, take_rows
from transforms.deadletter import BadSink
from transforms.fs import FileSystems
from transforms.read.delimited.ranges import TextRange, csv_ranges, json_line_ranges
from transforms.read.delimited.reader import CsvOptions, csv_batches
from transforms.read.files import is_local
from transforms.read.json_reader import json_batches
from transforms.read.parquet_reader import parquet_batches, parquet_footers
from transforms.read.partitions import PartitionColumns, Partitions, Values, file_schema
from transforms.read.unify import conform

__all__ = [
    "ReadTask",
    "WorkItem",
    "cut_reference_tables",
    "cut_text_files",
    "plan_whole_files",
    "plan_work",
    "read_work_item",
    "slice_by_rows",
    "with_columns",
    "with_partitions",
]


@dataclasses.dataclass(frozen=True)
class WorkItem:
    path: str
    row_group: int | None  # None: the whole file (CSV, or Parquet whose footer was not read)
    first_row: int
    num_rows: int | None = None  # a row group's rows (None for a whole file: not read yet)
    source_bytes: int = 0  # a row group's uncompressed bytes, a whole file's size on disk
    schema_of: str | None = None  # a whole Parquet file: the file its schema must equal
    partition: Values = ()  # (key, value) of each partition key of the file's path
    # schema: unify: the planned columns the file has, when it lacks some (else None)
    columns: tuple[str, ...] | None = None
    # a CSV or JSON Lines file cut by rows: its data rows [start, stop) (stop None: to the end)
    rows: tuple[int, int | None] | None = None
    row_groups: int = 1  # Parquet: the consecutive row groups from `row_group` the item reads
    part: TextRange | None = None  # a CSV file cut into byte ranges: the range the item reads


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """Work items one worker reads in order, in one go: the rows of one set of output shards
    (see transforms/write/sizing.py)."""

    index: int
    items: tuple[WorkItem, ...]


def plan_work(
    paths: Sequence[str], fmt: str, footers: Sequence[pq.FileMetaData] | None = None
) -> list[WorkItem]:
    """Parquet: one item per row group (the unit a worker reads); CSV, JSON Lines: one item per
    file.

    `footers`: the Parquet footers of `paths` when the caller has read them (else they are
    read here)."""
    if fmt in ("csv", "jsonl"):
        sizes = {
            m.path: m.size_in_bytes for r in FileSystems.match(list(paths)) for m in r.metadata_list
        }
        return [WorkItem(p, None, 0, None, int(sizes.get(p, 0))) for p in paths]
    if footers is None:
        footers = parquet_footers(paths)
    items = []
    for path, meta in zip(paths, footers, strict=True):
        items += _row_group_items(path, meta)
    return items


# A work item costs the in-process engine a few milliseconds whatever its rows (its task
# message, its spill file, its statistics), and reading one row group of a file costs a look at
# its footer. A file of more row groups than MAX_ITEMS_PER_FILE has runs of consecutive row
# groups read as one item: a run ends once it holds RUN_ROWS rows (or 1 / MAX_ITEMS_PER_FILE of
# the file's rows, if more) or RUN_BYTES bytes. A file of up to MAX_ITEMS_PER_FILE row groups
# keeps one item per row group.
MAX_ITEMS_PER_FILE = 256
RUN_ROWS = 16_384
RUN_BYTES = 64 << 20  # uncompressed, as the footer says


def _row_group_items(path: str, meta: pq.FileMetaData) -> list[WorkItem]:
    """The work items of one Parquet file: one per row group, or runs of consecutive row groups
    past MAX_ITEMS_PER_FILE of them (an empty row group is no work: it starts no item)."""
    groups = [meta.row_group(rg) for rg in range(meta.num_row_groups)]
    rows = [g.num_rows for g in groups]
    sizes = [int(g.total_byte_size) for g in groups]
    joined = len(groups) > MAX_ITEMS_PER_FILE
    least = max(RUN_ROWS, -(-sum(rows) // MAX_ITEMS_PER_FILE)) if joined else 1
    items, start, first = [], 0, 0
    while start < len(groups):
        if not rows[start]:  # an empty row group starts no item
            start += 1
            continue
        stop, n, size = start, 0, 0
        while stop < len(groups) and (stop == start or (n < least and size < RUN_BYTES)):
            n, size, stop = n + rows[stop], size + sizes[stop], stop + 1
        items.append(WorkItem(path, start, first, n, size, row_groups=stop - start))
        start, first = stop, first + n
    return items


def plan_whole_files(sizes: Mapping[str, int]) -> list[WorkItem]:
    """Parquet files whose footers are not read at construction: one item per file (path ->
    size on disk, in order), each to have the schema of the first."""
    first = next(iter(sizes), None)
    return [WorkItem(path, None, 0, None, int(size), first) for path, size in sizes.items()]


def cut_text_files(
    items: Sequence[WorkItem], fmt: str, csv: CsvOptions, sizes: Mapping[str, int] | None = None
) -> list[WorkItem]:
    """The items of large local, uncompressed CSV or JSON Lines files cut into byte ranges at
    row (line) starts, one item per range (CSV: `csv.range_bytes`; JSON Lines:
    JSON_RANGE_BYTES; transforms/read/delimited/ranges.py), each with its first data row and its
    rows; every other item as it is. `sizes`: a range size per path in place of those."""
    out: list[WorkItem] = []
    for item in items:
        parts = None
        size = None if sizes is None else sizes.get(item.path)
        named = sizes is None or size is not None  # with `sizes`, only the files it names
        if named and item.rows is None and item.part is None and is_local(item.path):
            if _compressed(item.path):
                parts = None
            elif fmt == "jsonl":
                parts = json_line_ranges(item.path, size)
            else:
                parts = csv_ranges(
                    item.path, csv.delimiter, csv.quote_char, csv.escape_char, csv.header,
                    csv.range_bytes if size is None else size,
                )  # fmt: skip
        if parts is None:
            out.append(item)
            continue
        out += [
            dataclasses.replace(
                item, first_row=p.first_row, num_rows=p.rows, source_bytes=p.stop - p.start, part=p
            )
            for p in parts
        ]
    return out


def _compressed(path: str) -> bool:
    """Whether the reader decompresses the file (pyarrow goes by its extension)."""
    try:
        pa.Codec.detect(path)
    except (TypeError, ValueError):
        return False
    return True


# A table of file references is cut into items of about this many rows: its rows, not its bytes
# on disk, are the work (each reads a file). A local, uncompressed table is cut into byte ranges
# of about that many rows each (`cut_reference_tables`), which read only their own bytes. Any
# other table (compressed, on an object store, or starting with an empty line) is cut by row
# numbers (`slice_by_rows`): every such item reads the file from the start (a CSV row's start
# cannot be found without parsing the rows before it, quoted fields may hold line breaks) and
# stops after its rows, so the items of one file parse it (items + 1) / 2 times in all, and a
# file gets at most MAX_REFERENCE_SLICES of them.
REFERENCE_ROWS = 2048
MAX_REFERENCE_SLICES = 32


def cut_reference_tables(
    items: Sequence[WorkItem],
    fmt: str,
    csv: CsvOptions,
    rows_of: Callable[[WorkItem], float],
    rows_per_item: int = REFERENCE_ROWS,
) -> list[WorkItem]:
    """Each whole CSV or JSON Lines file of references in `items` cut into items of about
    `rows_per_item` data rows (`rows_of`: an estimate of a file's rows): a local, uncompressed
    file into byte ranges at row starts of its size over that many items (as `cut_text_files`
    cuts, each range with its exact first row and rows, so the estimate decides only how many
    ranges there are), any other by row numbers (`slice_by_rows`)."""
    estimates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for item in items:
        if item.row_group is not None or item.num_rows is not None or item.rows is not None:
            continue
        estimates[item.path] = estimate = max(0.0, rows_of(item))
        count = math.ceil(estimate / rows_per_item)
        if count > 1 and item.source_bytes > 0:
            sizes[item.path] = max(1, -(-item.source_bytes // count))
    ranged = cut_text_files(items, fmt, csv, sizes)
    return slice_by_rows(ranged, lambda item: estimates[item.path], rows_per_item)


def slice_by_rows(
    items: Sequence[WorkItem],
    rows_of: Callable[[WorkItem], float],
    rows_per_item: int = REFERENCE_ROWS,
    max_items: int = MAX_REFERENCE_SLICES,
) -> list[WorkItem]:
    """Each whole CSV or JSON Lines file of `items` cut into items of about `rows_per_item` of
    its data rows (`rows_of`: an estimate of a file's rows), at most `max_items` per file. The
    last item of a file reads to its end, so a low estimate loses no row; a high one leaves
    later items with no row. Each item's `source_bytes` is its share of the file's."""
    out: list[WorkItem] = []
    for item in items:
        if item.row_group is not None or item.num_rows is not None or item.rows is not None:
            out.append(item)
            continue
        estimate = max(0.0, rows_of(item))
        count = min(max_items, max(1, math.ceil(estimate / rows_per_item)))
        if count == 1:
            out.append(item)
            continue
        size = math.ceil(estimate / count)
        for k in range(count):
            share = item.source_bytes * (k + 1) // count - item.source_bytes * k // count
            stop = None if k == count - 1 else (k + 1) * size
            out.append(dataclasses.replace(item, source_bytes=share, rows=(k * size, stop)))
    return out


def with_partitions(items: Sequence[WorkItem], partitions: Partitions | None) -> list[WorkItem]:
    """The work items, each with the partition values of its file."""
    if partitions is None:
        return list(items)
    return [dataclasses.replace(w, partition=partitions.values[w.path]) for w in items]


def with_columns(
    items: Sequence[WorkItem], schema: pa.Schema, missing: Mapping[str, tuple[str, ...]]
) -> list[WorkItem]:
    """The work items, those of the files that lack columns (`schema: unify`) each with the
    planned columns its file has (a CSV reader reads those, then adds the others as nulls)."""
    return [
        dataclasses.replace(w, columns=tuple(n for n in schema.names if n not in missing[w.path]))
        if w.path in missing
        else w
        for w in items
    ]


def read_work_item(
    item: WorkItem,
    fmt: str,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None = None,
) -> Iterator[TableBatch]:
    """The rows of one work item, as batches of at most `batch_rows` rows in the input schema
    (the file's columns, then its partition keys).

    With `on_bad`, a CSV row or JSON line that cannot be read (wrong number of fields, not
    JSON, a value that does not convert) is passed to it as a dead-letter dict; without, it
    fails the read.
    """
    if item.rows is not None:
        yield from _read_rows(item, fmt, schema, csv, batch_rows, on_bad)
        return
    if not item.partition:
        yield from _read_file(item, fmt, schema, csv, batch_rows, on_bad)
        return
    columns = PartitionColumns(schema, item.partition)
    own = file_schema(schema, item.partition)
    for batch in _read_file(item, fmt, own, csv, batch_rows, on_bad):
        yield dataclasses.replace(batch, table=columns.append_to(batch.table))


def _read_rows(
    item: WorkItem,
    fmt: str,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None,
) -> Iterator[TableBatch]:
    """The data rows [start, stop) of an item cut by rows (`slice_by_rows`): the file read from
    its start, the batches' rows outside the range left to the items they belong to, and so
    are the bad rows (one without a row number goes to the first item)."""
    start, stop = item.rows or (0, None)
    end = math.inf if stop is None else stop

    def mine(row: int | None) -> bool:
        return start == 0 if row is None else start <= row < end

    def keep_bad(row: dict) -> None:
        if on_bad is not None and mine(row.get("row")):
            on_bad(row)

    whole = dataclasses.replace(item, rows=None)
    for batch in read_work_item(
        whole, fmt, schema, csv, batch_rows, None if on_bad is None else keep_bad
    ):
        numbers = source_rows(batch)
        if not len(numbers) or numbers[-1] < start:
            continue
        if numbers[0] >= end:
            return
        if numbers[0] >= start and numbers[-1] < end:
            yield batch
            continue
        kept = np.flatnonzero((numbers >= start) & (numbers < end))
        if len(kept):
            yield take_rows(batch, kept)


def _read_file(
    item: WorkItem,
    fmt: str,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None,
) -> Iterator[TableBatch]:
    if fmt == "jsonl":
        yield from json_batches(item.path, item.first_row, schema, batch_rows, on_bad, item.part)
        return
    if fmt == "csv":
        if item.columns is None:
            yield from csv_batches(
                item.path, item.first_row, schema, csv, batch_rows, on_bad, item.part
            )
            return
        # schema: unify: the file's own columns, in the planned types; the others as nulls
        own = pa.schema([schema.field(name) for name in item.columns])
        for batch in csv_batches(
            item.path, item.first_row, own, csv, batch_rows, on_bad, item.part
        ):
            table = conform(batch.table, schema, item.path, batch.first_row)
            yield dataclasses.replace(batch, table=table)
        return
    if item.row_group is None:  # a whole file: its footer is read here, its schema checked
        yield from parquet_batches(
            item.path, None, item.first_row, batch_rows, schema, item.schema_of
        )
        return
    yield from parquet_batches(
        item.path, item.row_group, item.first_row, batch_rows, target=schema, count=item.row_groups
    )
