"""Work items (a Parquet row group, a whole Parquet file, a CSV or JSON Lines file) and read
tasks: the units workers read.

Work is split at construction: one work item per Parquet row group (from the footers the plan
reads once, for the schema too), one per CSV or JSON Lines file. With very many Parquet files
the plan reads one footer only (pipeline/job/plan.py): one work item per whole file
(`plan_whole_files`), whose reader finds the row groups and checks the file's schema. A file of
a Hive-partitioned input carries its partition values (transforms/read/partitions.py), which the
reader appends to each batch. Each work item yields `TableBatch`es of at most `batch_rows` rows,
tagged with the source file and the 0-based index of their first data row in that file (for
error messages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.batch import TableBatch
from transforms.deadletter import BadSink
from transforms.fs import FileSystems
from transforms.read.csv_reader import CsvOptions, csv_batches
from transforms.read.json_reader import json_batches
from transforms.read.parquet_reader import parquet_batches, parquet_footers
from transforms.read.partitions import PartitionColumns, Partitions, Values, file_schema
from transforms.read.unify import conform

__all__ = [
    "ReadTask",
    "WorkItem",
    "plan_whole_files",
    "plan_work",
    "read_work_item",
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
        first = 0
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            if group.num_rows:  # an empty row group is no work
                items.append(WorkItem(path, rg, first, group.num_rows, int(group.total_byte_size)))
            first += group.num_rows
    return items


def plan_whole_files(sizes: Mapping[str, int]) -> list[WorkItem]:
    """Parquet files whose footers are not read at construction: one item per file (path ->
    size on disk, in order), each to have the schema of the first."""
    first = next(iter(sizes), None)
    return [WorkItem(path, None, 0, None, int(size), first) for path, size in sizes.items()]


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
    if not item.partition:
        yield from _read_file(item, fmt, schema, csv, batch_rows, on_bad)
        return
    columns = PartitionColumns(schema, item.partition)
    own = file_schema(schema, item.partition)
    for batch in _read_file(item, fmt, own, csv, batch_rows, on_bad):
        yield dataclasses.replace(batch, table=columns.append_to(batch.table))


def _read_file(
    item: WorkItem,
    fmt: str,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    on_bad: BadSink | None,
) -> Iterator[TableBatch]:
    if fmt == "jsonl":
        yield from json_batches(item.path, item.first_row, schema, batch_rows, on_bad)
        return
    if fmt == "csv":
        if item.columns is None:
            yield from csv_batches(item.path, item.first_row, schema, csv, batch_rows, on_bad)
            return
        # schema: unify: the file's own columns, in the planned types; the others as nulls
        own = pa.schema([schema.field(name) for name in item.columns])
        for batch in csv_batches(item.path, item.first_row, own, csv, batch_rows, on_bad):
            table = conform(batch.table, schema, item.path, batch.first_row)
            yield dataclasses.replace(batch, table=table)
        return
    if item.row_group is None:  # a whole file: its footer is read here, its schema checked
        yield from parquet_batches(
            item.path, None, item.first_row, batch_rows, schema, item.schema_of
        )
        return
    yield from parquet_batches(item.path, item.row_group, item.first_row, batch_rows, target=schema)
