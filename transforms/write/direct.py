"""Local files written through two staged buffers, the disk's work done on a thread while the
caller goes on, around the page cache (O_DIRECT) or through it: the shard files of every write
(transforms/write/files.py `BlockFile`), around it by default, and the grouped write's spill
files, through it by default (each kind's default in DEFAULT_IO).

Why by hand: a shard is kept and read later by another program. Written around the page cache
it has been handed to the disk when the job reports success (the job does not fsync), and no
byte of it lands in a page the kernel allocates for it: on a virtual machine that hands freed
memory back to its host, a page allocated fresh can be slow to get. Shards, on a 2-core VM
(`convert`, 2 workers, 4M rows of the bench's basic table), on 2026-12-06: with
`--compression none` 4.41-7.44 s of system time through the page cache, 0.71-0.80 s around it;
gzip 1.21-1.93 s against 0.66-0.76 s; on 2026-12-07, a day its page cache was fast, the page
cache was the faster for shards too (docs/output.md). O_DIRECT needs its buffers, offsets and
lengths aligned to the disk's block: both classes stage bytes in page-aligned buffers (an extra
memory copy, about 0.1 s per GB) and pad the file's tail, which `close` cuts off again.

A spill file is written once, read back once soon after and deleted. Around the page cache
that is a write and a read of the disk and, at the deletion, the freeing of the file's blocks
(with a `discard` mount, a discard of each): a 4M-row `--shuffle --workers 2` leaves 1.7 GB of
spill files, whose deletion took 1.13 s at the job's end. Through the page cache, a file
deleted before the kernel writes it back never reaches the disk. On the VM above, the page
cache was the slower for spill files when O_DIRECT came in (1.2 GB written in 0.27 s warm and
6.5-8.5 s cold, against 0.49-0.75 s; the 4M-row `--shuffle` spent 3-13 s of system time against
2-5 s), and the faster in every `--shuffle` run measured since (docs/performance.md, "Spill
files through the page cache again"): spill files go through it.

`SPILL_IO` and `OUTPUT_IO` in the environment (`direct` or `buffered`) choose for spill files
and shards. Where the file system refuses O_DIRECT (EINVAL at open or at the first write) the
file is written through the page cache.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

__all__ = ["ALIGN", "DEFAULT_IO", "DirectReader", "DirectWriter", "direct_wanted", "read_ahead"]

T = TypeVar("T")

ALIGN = 4096  # O_DIRECT's alignment: the largest logical block size of common disks
STAGE_BYTES = 8 << 20  # bytes staged before a write: two stages, one filling while one is written
_O_DIRECT = getattr(os, "O_DIRECT", 0)


# How each kind of file is written unless its environment variable says otherwise (see above).
DEFAULT_IO = {"SPILL_IO": "buffered", "OUTPUT_IO": "direct"}


def direct_wanted(variable: str = "SPILL_IO") -> bool:
    """Whether files of a kind try O_DIRECT: on a system that has it, when the environment
    variable of that kind (SPILL_IO, OUTPUT_IO) says `direct`, or it says neither `direct` nor
    `buffered` and the kind's default (DEFAULT_IO) is O_DIRECT."""
    mode = os.environ.get(variable, "").lower()
    if mode not in ("direct", "buffered"):
        mode = DEFAULT_IO[variable]
    return bool(_O_DIRECT) and mode == "direct"


_FREE: list[mmap.mmap] = []  # buffers of STAGE_BYTES that closed writers and readers let go
_FREE_MAX = 6  # kept for the next ones: a buffer used again is not faulted in afresh (a spill
# file per work item would otherwise touch 16 MiB of new pages; a 4M-row --shuffle on 2 workers
# took 2.06-2.42 s of system time with them kept, 2.22-3.03 s without)


def _take(size: int) -> mmap.mmap:
    """A page-aligned buffer of `size` bytes: one let go before where there is one."""
    if size == STAGE_BYTES and _FREE:
        with contextlib.suppress(IndexError):  # another thread took the last one
            return _FREE.pop()
    return _new_buffer(size)


def _new_buffer(size: int) -> mmap.mmap:
    """Private anonymous memory (Python's default for -1 is shared memory, which a forked
    worker would share with its parent)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


def _give(buffer: mmap.mmap) -> None:
    """Let go of a buffer: kept for `_take`, or closed. One still viewed (a failed write's
    traceback holds it) is left to be freed with its views."""
    if len(buffer) == STAGE_BYTES and len(_FREE) < _FREE_MAX:
        _FREE.append(buffer)
        return
    with contextlib.suppress(BufferError):
        buffer.close()


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Background:
    """One call at a time on a thread (started per call: no thread outlives it, so a worker
    forked meanwhile inherits none); `wait` re-raises what the call raised."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, call: Callable[[], None]) -> None:
        self.wait()

        def run() -> None:
            try:
                call()
            except BaseException as err:
                self._error = err

        self._thread = threading.Thread(target=run, name="spill-io", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the call under way, if any (what it raises stays for `wait`)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        self.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def read_ahead(loads: Iterable[Callable[[], T]]) -> Iterator[T]:
    """The loads' results in order, each load run on a thread while the caller works on the
    result before it (one load ahead: the disk's waits overlap the caller's work). Leaving
    early waits for the load under way."""
    io, box = _Background(), []
    loads = iter(loads)
    first = next(loads, None)
    if first is None:
        return
    io.start(lambda: box.append(first()))
    try:
        for load in loads:
            io.wait()
            result = box.pop()
            io.start(lambda load=load: box.append(load()))
            yield result
        io.wait()
        yield box.pop()
    finally:
        io.join()


class DirectWriter:
    """A new local file written through two page-aligned stages: a full stage is written with
    O_DIRECT on a thread while the other fills. `tell()` is the bytes taken so far; the file
    holds them all once `close` returns."""

    def __init__(self, path: str, direct: bool | None = None) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._direct = direct_wanted() if direct is None else direct and bool(_O_DIRECT)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # as Beam's local create does
        try:
            self._fd = os.open(path, flags | (_O_DIRECT if self._direct else 0), 0o644)
        except OSError as err:
            if err.errno != errno.EINVAL or not self._direct:
                raise
            self._direct = False
            self._fd = os.open(path, flags, 0o644)
        self._flags = flags
        self._stages = [_take(STAGE_BYTES), _take(STAGE_BYTES)]
        self._stage, self._fill = 0, 0
        self._written = 0  # bytes handed to the disk (a multiple of STAGE_BYTES)
        self._io = _Background()

    def tell(self) -> int:
        return self._written + self._fill

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            n = min(view.nbytes, STAGE_BYTES - self._fill)
            self._stages[self._stage][self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]
            if self._fill == STAGE_BYTES:
                self._flush(STAGE_BYTES)

    def _failed(self) -> None:
        """A write failed: nothing more is written, `close` only lets go."""
        self._fill = -1

    def _flush(self, length: int) -> None:
        """Write the current stage's first `length` bytes (rounded up to ALIGN) at the end of
        what was written, on the thread, and switch to the other stage."""
        stage, offset = self._stages[self._stage], self._written
        size = _round_up(length) if self._direct else length
        try:
            self._io.start(lambda: self._pwrite(memoryview(stage)[:size], offset))
        except BaseException:  # the write before failed
            self._failed()
            raise
        self._written += length
        self._stage, self._fill = 1 - self._stage, 0

    def _pwrite(self, view: memoryview, offset: int) -> None:
        while view.nbytes:
            try:
                n = os.pwrite(self._fd, view, offset)
            except OSError as err:
                if err.errno != errno.EINVAL or not self._direct or offset != 0:
                    raise
                self._reopen_buffered()  # the file system took the open, not the write
                continue
            view, offset = view[n:], offset + n

    def _reopen_buffered(self) -> None:
        os.close(self._fd)
        self._direct = False
        self._fd = os.open(self.path, self._flags, 0o644)

    def close(self) -> None:
        """Write what is staged, wait for the disk, cut the padding off, close (after a failed
        write: close, write nothing more)."""
        if self._fd < 0:
            return
        try:
            if self._fill < 0:
                self._io.join()
                return
            if self._fill:
                self._flush(self._fill)
            self._io.wait()
            os.ftruncate(self._fd, self._written)  # the last write's padding
        except BaseException:
            self._failed()
            raise
        finally:
            os.close(self._fd)
            self._fd = -1
            failed = self._fill < 0
            for stage in self._stages:
                if failed:  # a failed write's traceback may still view it
                    with contextlib.suppress(BufferError):
                        stage.close()
                else:
                    _give(stage)
            self._stages = []


class DirectReader:
    """Reads byte ranges of local files with O_DIRECT: the aligned range around the wanted one
    is read into a page-aligned buffer (kept for the next read), then the wanted bytes are
    copied out. One thread at a time."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[int, bool]] = {}  # path: (descriptor, opened with O_DIRECT)
        self._scratch = _take(STAGE_BYTES)

    def read_into(self, path: str, start: int, out: memoryview) -> int:
        """Fill `out` with the file's bytes from `start`; the bytes it got (fewer at the end of
        the file)."""
        if path not in self._files:
            self._files[path] = _open_read(path)
        (fd, direct), want = self._files[path], out.nbytes
        if not direct:
            return _pread_all(fd, out, start)
        begin = start - start % ALIGN
        span = _round_up(start + want) - begin
        if span > len(self._scratch):
            _give(self._scratch)
            self._scratch = _new_buffer(span)
        with memoryview(self._scratch) as scratch:
            got = max(0, min(want, _pread_all(fd, scratch[:span], begin) - (start - begin)))
            out[:got] = scratch[start - begin : start - begin + got]
        return got

    def close(self) -> None:
        for fd, _ in self._files.values():
            os.close(fd)
        self._files = {}
        _give(self._scratch)


def _open_read(path: str) -> tuple[int, bool]:
    """(descriptor, opened with O_DIRECT) of `path`: O_DIRECT where wanted and taken."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    direct = direct_wanted()
    try:
        return os.open(path, flags | (_O_DIRECT if direct else 0)), direct
    except OSError as err:
        if err.errno != errno.EINVAL or not direct:
            raise
        return os.open(path, flags), False


def _pread_all(fd: int, out: memoryview, offset: int) -> int:
    """Read into `out` from `offset` until it is full or the file ends; the bytes read."""
    done = 0
    while done < out.nbytes:
        n = os.preadv(fd, [out[done:]], offset + done)
        if not n:
            break
        done += n
    return done
