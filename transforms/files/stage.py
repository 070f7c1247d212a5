"""The files stage: the references of a batch -> the files' contents as binary columns (and an
image's or audio file's facts as columns beside them), a part of the batch at a time.

Files are read by a pool of threads of this process, in row order, a bounded number at a time:
32 in flight for an object store (each read waits on the network), or as many as this process
has cores for local files (decoding and resizing run in Pillow's C code, which lets other
threads run). The rows come out in parts of about `CHUNK_BYTES` of file contents, each part
ready to be encoded and written before the next is read, so a worker holds one part, and the
files in flight, at a time: memory does not grow with the batch.

A row whose file cannot be had (no such file, too large, not an image, corrupt: a `BadFileError`)
is left out of its part and becomes a bad row (stage `files`), with the file's path and the
reason; its other columns are as they came. Rows are checked one by one as they are read, so
no row is read twice.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms import fs
from transforms.batch import TableBatch, source_rows, take_rows
from transforms.deadletter import bad_row, row_values
from transforms.files.fetch import BadFileError, read_file, resolve, table_directory
from transforms.files.plan import FilesPlan, PlannedColumn

__all__ = ["CHUNK_BYTES", "REMOTE_THREADS", "STAGE", "in_order", "read_files", "thread_count"]

STAGE = "files"
CHUNK_BYTES = 64 * 2**20  # file contents per part of a batch
REMOTE_THREADS = 32  # reads in flight per process on an object store
_LOCAL_GROUP = 16  # rows per task on local files (a task costs a thread hand-off)

T = TypeVar("T")
R = TypeVar("R")
BadRows = list[dict[str, Any]]
Cell = tuple[bytes | None, tuple[Any, ...] | None]  # (contents, the facts beside them)

_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def thread_count(remote: bool) -> int:
    """Threads that read files in this process: REMOTE_THREADS for an object store, else the
    cores this process may use."""
    if remote:
        return REMOTE_THREADS
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of `threads` threads (a forked worker makes its own)."""
    key = (os.getpid(), threads)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(threads, thread_name_prefix="files")
        return pool


def in_order(fn: Callable[[T], R], tasks: Iterable[T], threads: int) -> Iterator[R]:
    """`fn` of each task, in order, on `threads` threads with at most 2 x `threads` in flight."""
    if threads <= 1:
        yield from map(fn, tasks)
        return
    pool = _pool(threads)
    pending: collections.deque[Future] = collections.deque()
    for task in tasks:
        pending.append(pool.submit(fn, task))
        if len(pending) >= 2 * threads:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _contents(column: PlannedColumn, path: str) -> Cell:
    """One file's stored bytes and facts (BadFileError when it cannot be had)."""
    options = column.options
    data = read_file(path, options.max_file_bytes)
    if options.image is not None:
        from transforms.files.image import process_image  # Pillow, imported when first used

        image = process_image(data, options.image)
        return image.data, (image.height, image.width, image.channels)
    if options.audio is not None:
        from transforms.files.audio import audio_info  # soundfile, imported when first used

        audio = audio_info(data)
        return data, (audio.sample_rate, audio.channels, audio.duration)
    return data, ()


@dataclasses.dataclass(frozen=True)
class _Fault:
    column: str
    reason: str


def _row(
    columns: Sequence[PlannedColumn], directory: str, refs: Sequence[str | None]
) -> list[Cell] | _Fault:
    """One row's cells, or the fault of its first file that cannot be had."""
    cells: list[Cell] = []
    for column, ref in zip(columns, refs, strict=True):
        if ref is None:
            cells.append((None, None))
            continue
        path = ref
        try:
            path = resolve(ref, directory)
            cells.append(_contents(column, path))
        except BadFileError as fault:
            where = f"{path}: " if path else ""
            return _Fault(column.column, f"{where}{fault}")
    return cells


class _Part:
    """The good rows read so far, column by column, until they are cut off as a batch."""

    def __init__(self, columns: Sequence[PlannedColumn]) -> None:
        self.columns = columns
        self.rows: list[int] = []
        self.values: list[list[bytes | None]] = [[] for _ in columns]
        self.facts: list[list[tuple[Any, ...] | None]] = [[] for _ in columns]
        self.bytes = 0

    def add(self, index: int, cells: list[Cell]) -> None:
        self.rows.append(index)
        for i, (value, facts) in enumerate(cells):
            self.values[i].append(value)
            self.facts[i].append(facts)
            self.bytes += 0 if value is None else len(value)

    def batch(self, source: TableBatch) -> TableBatch | None:
        """The part's rows of `source`, each file column replaced by the contents and its
        facts appended, in the order of the plan's schema."""
        if not self.rows:
            return None
        part = take_rows(source, np.asarray(self.rows, dtype=np.int64))
        table = part.table
        for column, values, facts in zip(self.columns, self.values, self.facts, strict=True):
            contents = pa.array(values, pa.binary())
            if column.output == column.column:
                index = table.schema.get_field_index(column.column)
                table = table.set_column(index, pa.field(column.output, pa.binary()), contents)
            else:
                table = table.append_column(pa.field(column.output, pa.binary()), contents)
            for k, (name, kind) in enumerate(column.extra):
                value = pa.array([None if f is None else f[k] for f in facts], kind)
                table = table.append_column(pa.field(name, kind), value)
        return dataclasses.replace(part, table=table)


def _references(table: pa.Table, name: str) -> list[str | None]:
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


def _remote(table: pa.Table, plan: FilesPlan, directory: str) -> bool:
    if not fs.is_local(directory):
        return True
    for column in plan.columns:
        refs = table.column(column.column)
        if pa.types.is_dictionary(refs.type):
            refs = refs.cast(refs.type.value_type)
        if pc.any(pc.match_substring(refs, "://")).as_py():
            return True
    return False


def read_files(plan: FilesPlan, batch: TableBatch) -> Iterator[tuple[TableBatch | None, BadRows]]:
    """The batch with every `files:` column read, in parts of about CHUNK_BYTES of contents
    (None when a part kept no row), each with the rows whose files could not be had."""
    table = batch.table
    n = table.num_rows
    if n == 0:
        yield batch, []
        return
    directory = table_directory(batch.source)
    columns = plan.columns
    refs = [_references(table, c.column) for c in columns]
    remote = _remote(table, plan, directory)
    threads = thread_count(remote)
    size = 1 if remote or threads == 1 else _LOCAL_GROUP
    groups = [range(i, min(i + size, n)) for i in range(0, n, size)]

    def read_group(rows: range) -> list[list[Cell] | _Fault]:
        return [_row(columns, directory, [r[i] for r in refs]) for i in rows]

    numbers = source_rows(batch)
    part, bad = _Part(columns), []
    for rows, results in zip(groups, in_order(read_group, groups, threads), strict=True):
        for i, result in zip(rows, results, strict=True):
            if isinstance(result, _Fault):
                row = int(numbers[i])
                reason = f"{batch.source}: row {row}: column {result.column!r}: {result.reason}"
                values = row_values(table, i)
                bad.append(bad_row(batch.source, row, result.column, reason, STAGE, values))
            else:
                part.add(i, result)
            if part.bytes >= CHUNK_BYTES:
                yield part.batch(batch), bad
                part, bad = _Part(columns), []
    if part.rows or bad:
        yield part.batch(batch), bad
