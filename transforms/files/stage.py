"""The files stage: the references of a batch -> the files' contents as binary columns (and an
image's or audio file's facts as columns beside them), a part of the batch at a time.

References are resolved a column at a time (transforms/files/fetch.py). Files are then read in
row order, a bounded number at a time: by 32 threads for an object store (each read waits on
the network); by as many threads as this process has cores when local files are decoded
(Pillow's and libsndfile's C code lets other threads run); by this thread alone when local
files are only read (a read of a small file in the page cache costs about as much as handing
it to a thread), and then, where it runs, by the compiled loop of local_reads.py straight into
the part's buffers, the rows it leaves read here. The rows come out in parts of about
`CHUNK_BYTES` of file contents, each part ready to be encoded and written before the next is
read, so a worker holds one part, and the files in flight, at a time: memory does not grow
with the batch. Read here, a part's contents are joined into one Arrow buffer once, when the
part is cut.

A row whose file cannot be had (no such file, too large, not an image, corrupt: a
`BadFileError`) is left out of its part and becomes a bad row (stage `files`), with the file's
path and the reason; its other columns are as they came. Rows are checked one by one as they
are read; a file is read twice only when the compiled loop leaves it to this module.
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
from transforms.files import local_reads
from transforms.files.fetch import (
    BadFileError,
    read_file,
    read_local,
    resolve_column,
    resolve_local_column,
    table_directory,
)
from transforms.files.local_reads import NULL
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


def thread_count(remote: bool, decodes: bool) -> int:
    """Threads that read files in this process: REMOTE_THREADS for an object store; the cores
    this process may use when local files are decoded; 1 when they are only read."""
    if remote:
        return REMOTE_THREADS
    if not decodes:
        return 1
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


def _contents(column: PlannedColumn, path: str, local: bool) -> Cell:
    """One file's stored bytes and facts (BadFileError when it cannot be had)."""
    options = column.options
    data = (
        read_local(path, options.max_file_bytes)
        if local
        else read_file(path, options.max_file_bytes)
    )
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


class _Reader:
    """Reads one row's files: the resolved paths of every column, by row."""

    def __init__(
        self, columns: Sequence[PlannedColumn], paths: Sequence[list[str | BadFileError | None]]
    ) -> None:
        self.columns = columns
        self.paths = paths
        self.local = [  # a scheme anywhere: read through read_file, which tells them apart
            all(not isinstance(p, str) or "://" not in p for p in column) for column in paths
        ]

    def row(self, i: int) -> list[Cell] | _Fault:
        """Row `i`'s cells, or the fault of its first file that cannot be had."""
        cells: list[Cell] = []
        for k, column in enumerate(self.columns):
            path = self.paths[k][i]
            if path is None:
                cells.append((None, None))
                continue
            try:
                if isinstance(path, BadFileError):
                    raise path
                cells.append(_contents(column, path, self.local[k]))
            except BadFileError as fault:
                where = f"{path}: " if isinstance(path, str) and path else ""
                return _Fault(column.column, f"{where}{fault}")
        return cells

    def rows(self, indices: range) -> list[list[Cell] | _Fault]:
        return [self.row(i) for i in indices]


def _binary(values: list[bytes | None]) -> pa.Array:
    """`values` as one Arrow binary array: the bytes joined once, offsets from their lengths."""
    sizes = np.fromiter((NULL if v is None else len(v) for v in values), np.int64, len(values))
    return _from_buffer(b"".join(v for v in values if v is not None), sizes)


def _from_buffer(buffer: bytes | np.ndarray, sizes: np.ndarray) -> pa.Array:
    """The rows' contents one after another in `buffer` (each row's size in `sizes`, NULL for a
    null), as one Arrow binary array over it."""
    n = len(sizes)
    valid = sizes != NULL
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.where(valid, sizes, 0), out=offsets[1:])
    nulls = n - int(valid.sum())
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    data = pa.py_buffer(buffer).slice(0, int(offsets[-1]))
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), data], nulls)


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
        contents = [_binary(values) for values in self.values]
        return _with_contents(source, self.rows, self.columns, contents, self.facts)


def _with_contents(
    source: TableBatch,
    rows: Sequence[int] | np.ndarray,
    columns: Sequence[PlannedColumn],
    contents: Sequence[pa.Array],
    facts: Sequence[Sequence[tuple[Any, ...] | None]] | None,
) -> TableBatch:
    """The `rows` of `source`, each file column replaced by its `contents` and its `facts`
    appended (None: the columns have none), in the order of the plan's schema."""
    part = take_rows(source, np.asarray(rows, dtype=np.int64))
    table = part.table
    for k, column in enumerate(columns):
        field = pa.field(column.output, pa.binary())
        if column.output == column.column:
            table = table.set_column(
                table.schema.get_field_index(column.column), field, contents[k]
            )
        else:
            table = table.append_column(field, contents[k])
        for j, (name, kind) in enumerate(column.extra):
            value = pa.array([None if f is None else f[j] for f in facts[k]], kind)
            table = table.append_column(pa.field(name, kind), value)
    return dataclasses.replace(part, table=table)


def _bad(batch: TableBatch, numbers: np.ndarray, i: int, fault: _Fault) -> dict[str, Any]:
    """Row `i` of the batch as a bad row of the files stage."""
    row = int(numbers[i])
    reason = f"{batch.source}: row {row}: column {fault.column!r}: {fault.reason}"
    values = row_values(batch.table, i)
    return bad_row(batch.source, row, fault.column, reason, STAGE, values)


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
    decodes = any(c.options.kind != "bytes" for c in columns)
    if not decodes and fs.is_local(batch.source) and local_reads.wanted():
        paths = [
            resolve_local_column(table.column(c.column).combine_chunks(), directory)
            for c in columns
        ]
        if not any(pc.any(pc.match_substring(p, "://")).as_py() for p in paths):
            yield from _read_compiled(columns, batch, paths)
            return
    reader = _Reader(
        columns,
        [resolve_column(table.column(c.column).combine_chunks(), directory) for c in columns],
    )
    threads = thread_count(not all(reader.local), decodes)
    size = _LOCAL_GROUP if all(reader.local) else 1
    groups = [range(i, min(i + size, n)) for i in range(0, n, size)]
    numbers = source_rows(batch)
    part, bad = _Part(columns), []
    for rows, results in zip(groups, in_order(reader.rows, groups, threads), strict=True):
        for i, result in zip(rows, results, strict=True):
            if isinstance(result, _Fault):
                bad.append(_bad(batch, numbers, i, result))
            else:
                part.add(i, result)
            if part.bytes >= CHUNK_BYTES:
                yield part.batch(batch), bad
                part, bad = _Part(columns), []
    if part.rows or bad:
        yield part.batch(batch), bad


def _read_compiled(
    columns: Sequence[PlannedColumn], batch: TableBatch, paths: list[pa.Array]
) -> Iterator[tuple[TableBatch | None, BadRows]]:
    """`read_files` of local files kept as bytes: each part read by the compiled loop
    (transforms/files/local_reads.py) into its columns' buffers; the rows it leaves (a file
    with a fault, or one it does not read whole) read here one by one, as the Python way does."""
    rows = local_reads.LocalRows(paths, [c.options.max_file_bytes for c in columns])
    numbers = source_rows(batch)
    start = 0
    while start < rows.n:
        end, buffers = rows.read(start, CHUNK_BYTES)
        bad: BadRows = []
        redone: dict[int, list[Cell]] = {}
        for i in np.flatnonzero(rows.fallback[start:end]) + start:
            result = _Reader(columns, [[p[int(i)].as_py()] for p in paths]).row(0)
            if isinstance(result, _Fault):
                bad.append(_bad(batch, numbers, int(i), result))
            else:
                redone[int(i)] = result
        kept = np.arange(start, end)[~rows.fallback[start:end]]
        contents = [_from_buffer(buffer, rows.sizes[k, kept]) for k, buffer in enumerate(buffers)]
        if redone:  # rare: put the rows read here in their places
            kept, contents = _with_redone(kept, contents, redone)
        if len(kept):
            yield _with_contents(batch, kept, columns, contents, None), bad
        elif bad:
            yield None, bad
        start = end


def _with_redone(
    kept: np.ndarray, contents: list[pa.Array], redone: dict[int, list[Cell]]
) -> tuple[np.ndarray, list[pa.Array]]:
    """The rows kept by the compiled loop and those read again here, in row order, and each
    column's contents over both."""
    order = np.sort(np.concatenate([kept, np.fromiter(redone, np.int64, len(redone))]))
    place = {int(i): k for k, i in enumerate(kept)}
    out = []
    for k, column in enumerate(contents):
        values = column.to_pylist()
        out.append(
            _binary([redone[i][k][0] if i in redone else values[place[i]] for i in order.tolist()])
        )
    return order, out
