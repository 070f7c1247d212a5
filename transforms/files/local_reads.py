"""Local files read by one compiled loop straight into a part's buffers: the files stage's way
for `files:` columns kept as bytes (nothing decoded) when every reference is a local path.

`LocalRows.read` reads row after row (each row's file of every column: open, statx, read, close,
the C library's calls from the numba kernel) into one buffer per column, until the next row
would take the part past its budget of bytes (a first row past the budget is left to the Python
way, as a part of its own). A file lands where its part's Arrow binary column will hold it, so
there is no Python `bytes` object per file and no join of them: at 10,000 small JPEGs read
100,000 times from the page cache this loop took 1.04-1.11 s against 2.28-2.90 s for
`read_local` and a join of the contents (about 10 us a file against about 14, and the join),
measured in one process. The system calls are most of what is left: a C loop doing the same
took 0.86-1.06 s, of which open and close alone 0.47-0.59 s.

The kernel takes only the common case: a regular file, no larger than the limit, read whole in
one call to the size statx gave. Any other row (a null path aside: it is a null) is marked for
the Python way (`fetch.read_local`), which opens it again and says what is wrong with it (not
found, a directory, too large, a FIFO, ...) or reads it as it is now (a file that grew, a
/proc file whose size says nothing): one place tells a file's faults, whichever way read it.

Linux with the C library's `statx` (glibc 2.28, musl 1.2.5) on a little-endian machine only
(`struct statx` has the same layout on every Linux architecture; its fields are read as
little-endian), where the kernel reads this module's own file when a process first asks;
elsewhere, or with `FILE_READS=python` in the environment, the stage reads every file in
Python.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from numba import njit

from transforms.encode.kernel.memory import (
    c_function,
    copy_memory,
    load_i64,
    load_u8,
    load_u32,
    store_u8,
)
from transforms.files.fetch import OPEN_FLAGS

__all__ = ["FALLBACK", "NULL", "LocalRows", "compile_kernel", "libc_functions", "wanted"]

NULL = -1  # a row's size: its path is null
FALLBACK = -2  # a row's size: the kernel left the file to the Python way
_PAST_BUDGET = -3  # what _read_one gives for a file that takes more room than the part has

# int open(const char *, int, ...); int statx(int, const char *, int, unsigned, struct statx *);
# ssize_t read(int, void *, size_t); int close(int)
_c_open = c_function(32, 64, 32, var_arg=True)
_c_statx = c_function(32, 32, 64, 32, 32, 64)
_c_read = c_function(64, 32, 64, 64)
_c_close = c_function(32, 32)

_PATH_MAX = 4096  # bytes of a path with its NUL (Linux's PATH_MAX)
_AT_EMPTY_PATH = 0x1000
_STATX_WANTED = 0x1 | 0x200  # STATX_TYPE | STATX_SIZE
_STATX_MASK, _STATX_MODE, _STATX_SIZE_AT = 0x00, 0x1C, 0x28  # field offsets in struct statx
_S_IFMT, _S_IFREG = 0o170000, 0o100000
_SCRATCH = _PATH_MAX + 64 + 256  # the path, an empty string, and struct statx (256 bytes)


@functools.cache
def libc_functions() -> np.ndarray | None:
    """The addresses of the C library's open, statx, read and close (as the kernel takes them),
    or None on a platform without them (the kernel reads statx's fields as little-endian)."""
    if sys.platform != "linux" or sys.byteorder != "little":
        return None
    try:
        libc = ctypes.CDLL(None)
        found = [ctypes.cast(getattr(libc, n), ctypes.c_void_p).value for n in _NAMES]
    except (OSError, AttributeError):
        return None
    return np.array(found, dtype=np.int64) if all(found) else None


_NAMES = ("open", "statx", "read", "close")


def wanted() -> bool:
    """Whether the stage reads local bytes with the kernel: where it runs and reads a file,
    unless `FILE_READS` in the environment says `python`."""
    return os.environ.get("FILE_READS", "").lower() != "python" and _reads_a_file()


@functools.cache
def _reads_a_file() -> bool:
    """Whether the kernel reads this module's own file, once per process: where a system call
    is refused (a sandbox that filters statx), every file would be left to the Python way and
    opened twice, so the stage reads in Python from the start."""
    if libc_functions() is None:
        return False
    path = os.path.abspath(__file__)
    rows = LocalRows([pa.array([path], pa.string())], [1 << 30])
    end, (buffer,) = rows.read(0, 1 << 20)
    size = int(rows.sizes[0, 0])
    with open(path, "rb") as f:
        return end == 1 and not rows.fallback[0] and bytes(buffer[:size]) == f.read()


@njit(cache=True, nogil=True)
def _read_one(fns, path, length, scratch, out, room, limit):  # noqa: ANN001, ANN202
    """One file's bytes at address `out`: its size; FALLBACK when the Python way must read it;
    or _PAST_BUDGET when it is no larger than `limit` but takes more than `room` bytes (its size
    and one more, to see a file that grew). `path` is the address of `length` bytes."""
    if length <= 0 or length >= _PATH_MAX:
        return FALLBACK
    for k in range(length):  # the path with a NUL after it: one inside would cut it short
        if load_u8(path + k) == 0:
            return FALLBACK
    copy_memory(scratch, path, length)
    store_u8(scratch + length, 0)
    fd = _c_open(fns[0], (scratch, OPEN_FLAGS))
    if fd < 0:
        return FALLBACK
    empty, info = scratch + _PATH_MAX, scratch + _PATH_MAX + 64
    store_u8(empty, 0)
    size = FALLBACK
    if _c_statx(fns[1], (fd, empty, _AT_EMPTY_PATH, _STATX_WANTED, info)) == 0:
        got = load_u32(info + _STATX_MASK) & _STATX_WANTED
        mode = load_u32(info + _STATX_MODE) & 0xFFFF
        if got == _STATX_WANTED and (mode & _S_IFMT) == _S_IFREG:
            size = load_i64(info + _STATX_SIZE_AT)
            if size > limit:
                size = FALLBACK
            elif size + 1 > room:
                size = _PAST_BUDGET
            elif _c_read(fns[2], (fd, out, size + 1)) != size:
                size = FALLBACK
    _c_close(fns[3], (fd,))
    return size


@njit(cache=True, nogil=True)
def _read_rows(fns, columns, valid, start, n, budget, sizes, fallback, scratch):  # noqa: ANN001, ANN202
    """The kernel of `LocalRows.read`: `columns` holds per column the addresses of its paths'
    offsets (int64) and bytes, of its buffer (budget + 1 bytes), and its limit."""
    width = columns.shape[0]
    pos = np.zeros(width, np.int64)
    base = scratch.ctypes.data
    total, kept = 0, 0
    for i in range(start, n):
        row, ok = 0, True
        for k in range(width):
            if valid[k, i] == 0:
                sizes[k, i] = NULL
                continue
            offsets = columns[k, 0]
            a, b = load_i64(offsets + 8 * i), load_i64(offsets + 8 * (i + 1))
            room = (budget - total - row if kept else budget) + 1
            out = columns[k, 2] + pos[k]
            size = _read_one(fns, columns[k, 1] + a, b - a, base, out, room, columns[k, 3])
            if size == _PAST_BUDGET:  # past the budget: the part ends before this row, or after it
                if kept:  # when no row is kept yet, the Python way reads it as a part alone
                    return i
                fallback[i] = True
                return i + 1
            if size == FALLBACK:
                ok = False
                break
            sizes[k, i] = size
            row += size
        fallback[i] = not ok
        if ok:  # else the bytes of this row already read are written over by the next one
            for k in range(width):
                if valid[k, i] != 0:
                    pos[k] += sizes[k, i]
            total += row
            kept += 1
    return n


class _Buffers:
    """Read buffers kept for the parts that follow. A part's files land in a buffer its Arrow
    column then holds (no copy), and a new buffer's pages are faulted in and zeroed by the
    kernel as the reads first touch them: at 10,000 small JPEGs read 100,000 times that was
    about 4% of a job's CPU samples (perf: `clear_page_erms` under `read`). A kept buffer is
    handed out again once nothing else holds it (the part's arrays dropped, as its reference
    count says), its pages already in place. At most KEEP are kept, two by default: a part's
    arrays are still held while the next part is read, so two take turns; they stay for the
    life of the process (2 x 64 MiB for the stage's parts). The loop alone over those 100,000
    rows in parts of 2,048: 17,860 page faults and 0.55-0.57 s before, none and 0.45-0.47 s
    with the buffers kept (one process, three runs each)."""

    KEEP = 2

    def __init__(self) -> None:
        self._kept: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A buffer of `size` bytes nothing else holds: a kept one, or a new one (kept in the
        place of an idle one of another size when KEEP are kept)."""
        with self._lock:
            held = _references(self._kept)
            idle = [i for i, n in enumerate(held) if n <= _UNHELD]
            for i in idle:
                if self._kept[i].nbytes == size:
                    return self._kept[i]
            buffer = np.empty(size, np.uint8)  # pages touched as used
            if len(self._kept) < self.KEEP:
                self._kept.append(buffer)
            elif idle:
                self._kept[idle[0]] = buffer
            return buffer


def _references(items: list) -> list[int]:
    """sys.getrefcount of each of `items`."""
    return [sys.getrefcount(item) for item in items]


# What _references says of an item nothing but its list holds: measured, not assumed.
_UNHELD = _references([np.empty(0)])[0]
_BUFFERS = _Buffers()


class LocalRows:
    """The files of a batch's rows, one local path column (string array) per `files:` column,
    read part after part."""

    def __init__(self, paths: Sequence[pa.Array], limits: Sequence[int]) -> None:
        fns = libc_functions()
        if fns is None:
            raise RuntimeError("the compiled reads need Linux with statx (see libc_functions)")
        self._fns = fns
        self.n = n = len(paths[0])
        self._offsets, self._data = [], []
        for column in paths:
            if not pa.types.is_large_string(column.type):
                column = column.cast(pa.large_string())
            _, offsets, data = column.buffers()
            self._offsets.append(np.frombuffer(offsets, np.int64)[column.offset :][: n + 1])
            empty = data is None  # every path null or ""
            self._data.append(np.zeros(1, np.uint8) if empty else np.frombuffer(data, np.uint8))
        self._limits = list(limits)
        self._valid = np.stack([np.asarray(c.is_valid()).astype(np.uint8) for c in paths])
        self.sizes = np.full((len(paths), n), NULL, np.int64)
        self.fallback = np.zeros(n, np.bool_)
        self._scratch = np.zeros(_SCRATCH, np.uint8)

    def read(self, start: int, budget: int) -> tuple[int, list[np.ndarray]]:
        """Rows `start`... read into one new buffer per column until the next row's files would
        take the part past `budget` bytes (a first row past it is left to the Python way): the
        end row and the buffers, the bytes of the rows kept one after another in row order.
        `sizes[k, i]` is then row i's size in column k (NULL for a null path), `fallback[i]`
        whether row i is left to the Python way (its sizes mean nothing)."""
        buffers = [_BUFFERS.take(budget + 1) for _ in self._offsets]
        columns = np.array(
            [
                [offsets.ctypes.data, data.ctypes.data, buffer.ctypes.data, limit]
                for offsets, data, buffer, limit in zip(
                    self._offsets, self._data, buffers, self._limits, strict=True
                )
            ],
            dtype=np.int64,
        )
        end = _read_rows(
            self._fns, columns, self._valid, start, self.n, budget, self.sizes, self.fallback,
            self._scratch,
        )  # fmt: skip
        return int(end), buffers


def compile_kernel() -> None:
    """Compile (or load from numba's cache) the kernel, e.g. while building a container."""
    _reads_a_file()
