"""Parquet files as Arrow batches: a work item is one row group, or a whole file whose footer
the plan did not read (many files: see pipeline/job/plan.py); read with pyarrow. And the footers of
many files at once, for the plan.

A whole file is read row group after row group (row numbers counting from the file's first
row) after its schema is checked against the planned one: the plan read only the first file's
footer, so this is where a file that does not match fails, naming both files.

A footer holds both what the plan needs of a file: its schema and its row groups. The plan reads
each footer once (`parquet_footers`). On an object store each read waits for a round trip or
two, so they go through a thread pool (pyarrow and the HTTP client release the GIL while they
wait): measured on the storage emulator, 3x faster than one by one. Local files are read one by
one: there a read takes a fraction of a millisecond and the pool's locking costs more than it
saves (measured: 10,000 files, 2.5 s one by one, 3.7 s with 16 threads).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.batch import TableBatch
from transforms.encode.schema import SchemaError
from transforms.read.files import InputError, is_local, open_input
from transforms.read.plain_types import plain_schema, plain_table
from transforms.read.unify import conform

__all__ = [
    "FOOTER_THREADS",
    "UNIFY_HINT",
    "footer_schema",
    "parquet_batches",
    "parquet_file",
    "parquet_footer",
    "parquet_footers",
    "row_group_file",
    "schema_difference",
]

FOOTER_THREADS = 16  # footer reads in flight on an object store (64 measured slower: 46 ms
# a footer on the emulator against 25-30 ms with 16)

# said after a mismatch under `schema: strict`: the way to read such a dataset
UNIFY_HINT = " (schema: unify reads files whose schemas differ as their union)"


def parquet_file(path: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """One Parquet file opened (`metadata`: its footer as parsed before, not parsed again)."""
    try:
        return pq.ParquetFile(open_input(path), metadata=metadata)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: cannot read as Parquet: {err}") from err


FOOTERS_KEPT = 4  # footers a process keeps for the row groups of a file still being read

_footers: dict[tuple[str, int, int, int, int], pq.FileMetaData] = {}
_footers_lock = threading.Lock()  # a Beam worker reads on several threads


def row_group_file(path: str) -> pq.ParquetFile:
    """`parquet_file` for reading one of its row groups: a local file's footer parsed once a
    process and kept (the last FOOTERS_KEPT files, by inode, size and change times), not once a
    row group. A row group is a work item, and parsing a footer costs time in proportion to the
    file's row groups: a file of 4,000 small row groups took 95 s to convert parsing its footer
    for each, against 2 s for the same rows in one group. An object's footer is read each time
    (an object rewritten in place has no cheap mark of change here); a file of thousands of
    small row groups is a few hundred work items, runs of them (transforms/read/work.py)."""
    if not is_local(path):
        return parquet_file(path)
    try:
        info = os.stat(path)
    except OSError:
        return parquet_file(path)  # the open names the fault
    key = (path, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _footers_lock:
        meta = _footers.get(key)
    if meta is None:
        source = parquet_file(path)
        with _footers_lock:
            while len(_footers) >= FOOTERS_KEPT:
                del _footers[next(iter(_footers))]
            _footers[key] = source.metadata
        return source
    return parquet_file(path, meta)


def parquet_footer(path: str) -> pq.FileMetaData:
    """The footer of one Parquet file: its schema (`.schema.to_arrow_schema()`, the stored Arrow
    schema when the writer kept one) and its row groups."""
    source = open_input(path)
    try:
        return pq.read_metadata(source)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: cannot read as Parquet: {err}") from err
    finally:
        if not isinstance(source, str):
            source.close()


def footer_schema(meta: pq.FileMetaData) -> pa.Schema:
    """The Arrow schema a footer stores, in the plain types the batches are read in
    (transforms/read/plain_types.py)."""
    return plain_schema(meta.schema.to_arrow_schema())


def parquet_footers(paths: Sequence[str], threads: int = FOOTER_THREADS) -> list[pq.FileMetaData]:
    """The footer of each file of `paths`, in order: local files one by one, others `threads`
    at a time; the first file (in order) that cannot be read raises InputError naming it."""
    if threads <= 1 or len(paths) <= 1 or all(is_local(p) for p in paths):
        return [parquet_footer(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(threads, len(paths))) as pool:
        return list(pool.map(parquet_footer, paths))


def schema_difference(a: pa.Schema, b: pa.Schema) -> str | None:
    """None when the schemas are equal, else what differs first (the columns, or the first
    column whose type differs)."""
    if a.equals(b):  # the usual case, at once (equal fields: equal names and types)
        return None
    if a.names != b.names:
        return f"columns {a.names} vs {b.names}"
    for fa, fb in zip(a, b, strict=True):
        if fa.type != fb.type:
            return f"column {fa.name!r}: {fa.type} vs {fb.type}"
    return None


def parquet_batches(
    path: str,
    row_group: int | None,
    first_row: int,
    batch_rows: int,
    schema: pa.Schema | None = None,
    schema_of: str | None = None,
    target: pa.Schema | None = None,
    count: int = 1,
) -> Iterator[TableBatch]:
    """The rows of `count` row groups from `row_group` (`row_group` None: of every row group of
    the file), in order, as batches of at most `batch_rows` rows.

    `schema`, `schema_of`: the schema the file must have and the file it was planned from; a
    file with another raises SchemaError naming both (as the plan does when it reads every
    footer). `target`: the planned schema each batch is cast to when the file's differs
    (`schema: unify`, `columns.<name>.type`; transforms/read/unify.py)."""
    first = first_row
    source = parquet_file(path) if row_group is None else row_group_file(path)
    stored = source.schema_arrow
    plain = plain_schema(stored)  # extension types and list views read as plain types
    if schema is not None:
        diff = schema_difference(schema, plain)
        if diff:
            raise SchemaError(
                f"{schema_of or path} and {path} do not have the same schema: {diff}{UNIFY_HINT}"
            )
    if target is not None and schema_difference(target, plain) is None:
        target = None  # the file has the planned schema: nothing to cast
    groups = None if row_group is None else list(range(row_group, row_group + count))
    batches = source.iter_batches(batch_size=batch_rows, row_groups=groups, use_threads=False)
    try:
        for batch in batches:
            for start in range(0, batch.num_rows, batch_rows):
                part = batch.slice(start, batch_rows)
                table = pa.Table.from_batches([part])
                if plain is not stored:
                    table = plain_table(table, plain)
                if target is not None:
                    table = conform(table, target, path, first)
                yield TableBatch(table=table, source=path, first_row=first)
                first += part.num_rows
    except (pa.ArrowException, OSError, EOFError) as err:
        raise InputError(f"{path}: after data row {first}: {err}") from err
