"""A large CSV or JSON Lines file cut into byte ranges at row boundaries, so that several
workers read it.

`csv_ranges` and `json_line_ranges` read the file once (memory-mapped) with scan.py's scans,
which find the first row start past each multiple of the range size and count the rows (and,
for JSON Lines, the lines) before it: every range knows its first data row (and line), so its
rows and bad rows carry the numbers they have when the file is read whole. A range is read as
the file's header line (CSV) followed by its own bytes (`open_range`), so the readers, their
bad-row paths (Python's csv module, a second read as text, JSON line by line) and pyarrow see a
file like any other; a range that no longer holds the rows counted (`check_rows`) fails the
read rather than lose or repeat a row.

Only a local, uncompressed file larger than 1.5 range sizes is cut (CSV: `range_bytes`, 0: none
is; JSON Lines: JSON_RANGE_BYTES): a compressed file cannot be read from the middle, and a file
on an object store would be read twice.
"""

from __future__ import annotations

import dataclasses
import io
import os

import numpy as np

from transforms.read.delimited.scan import BOM, scan_lines, scan_rows
from transforms.read.files import InputError

__all__ = [
    "JSON_RANGE_BYTES",
    "TextRange",
    "check_rows",
    "csv_ranges",
    "json_line_ranges",
    "open_range",
]

JSON_RANGE_BYTES = 64 << 20  # a JSON Lines file past 1.5 x this is read as ranges of this size


@dataclasses.dataclass(frozen=True)
class TextRange:
    """Bytes [start, stop) of a CSV or JSON Lines file: its rows from data row `first_row` on,
    `rows` of them; `header_end`: the end of a CSV file's header line (read before a range's
    own bytes; 0 for the first range, which starts with it, for a file without a header line,
    and for JSON Lines); `first_line`: the file's line number (from 1) of the range's first
    line (JSON Lines: its bad lines are named by line)."""

    start: int
    stop: int
    first_row: int
    rows: int
    header_end: int = 0
    first_line: int = 1


def _targets(path: str, size: int) -> tuple[int, np.ndarray] | None:
    """The file's size and the offsets to cut near, or None when it is not worth cutting."""
    total = os.path.getsize(path)
    if size <= 0 or total <= size * 3 // 2:
        return None
    return total, np.arange(size, total, size, dtype=np.int64)


def _ranges(
    total: int,
    cuts: np.ndarray,
    rows_at: np.ndarray,
    rows: int,
    lines_at: np.ndarray | None = None,
    header_end: int = 0,
) -> list[TextRange] | None:
    """The ranges between the distinct `cuts` past a header line ending at `header_end` (its
    row not a data row), given the rows (and lines) before each cut and the rows in all; None
    when that leaves a single range."""
    header_rows = 1 if header_end > 0 else 0
    starts, before, lines = [0], [0], [0]
    for k, cut in enumerate(cuts.tolist()):
        if cut >= total or cut <= starts[-1] or cut <= header_end:
            continue
        starts.append(cut)
        before.append(int(rows_at[k]) - header_rows)
        lines.append(0 if lines_at is None else int(lines_at[k]))
    if len(starts) == 1:
        return None
    stops = [*starts[1:], total]
    counts = [*before[1:], rows - header_rows]
    return [
        TextRange(a, b, first, count - first, header_end if i else 0, line + 1)
        for i, (a, b, first, count, line) in enumerate(
            zip(starts, stops, before, counts, lines, strict=True)
        )
    ]


def csv_ranges(
    path: str, delimiter: str, quote: str | None, escape: str | None, header: bool, size: int
) -> list[TextRange] | None:
    """The local file cut into ranges of about `size` bytes at row starts, or None when it is
    not worth cutting (at most 1.5 x `size`, or a single range once cut) or cannot be (it starts
    with an empty line, which pyarrow's skipping of a header would count as a row)."""
    planned = _targets(path, size)
    if planned is None:
        return None
    total, targets = planned
    data = np.memmap(path, dtype=np.uint8, mode="r")  # unmapped once no longer referenced
    if data[3 if bytes(data[:3]) == BOM else 0] in (10, 13):
        return None
    cuts, rows_at, first_end, rows = scan_rows(data, delimiter, quote, escape, targets)
    return _ranges(total, cuts, rows_at, rows, header_end=first_end if header else 0)


def json_line_ranges(path: str, size: int | None = None) -> list[TextRange] | None:
    """The local JSON Lines file cut into ranges of about `size` bytes (default
    JSON_RANGE_BYTES) at line starts, or None when it is not worth cutting (at most 1.5 x
    `size`, or one line); each range knows its first row and its first line number."""
    planned = _targets(path, JSON_RANGE_BYTES if size is None else size)
    if planned is None:
        return None
    total, targets = planned
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cuts, rows_at, lines_at, rows = scan_lines(data, targets)
    return _ranges(total, cuts, rows_at, rows, lines_at)


def check_rows(path: str, part: TextRange | None, rows: int) -> None:
    """A range's rows as the plan counted them: else the file changed since (a row lost or
    read twice by the next range is not let through)."""
    if part is not None and rows != part.rows:
        raise InputError(
            f"{path}: bytes {part.start:,}-{part.stop:,} hold {rows:,} rows where the plan "
            f"counted {part.rows:,}: the file changed while the job ran (run the job again)"
        )


class _RangeReader(io.RawIOBase):
    """The bytes a range is read as: the header line (when the range is not the first), then
    the range's own bytes."""

    def __init__(self, path: str, start: int, stop: int, header_end: int) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._header = os.pread(self._fd, header_end, 0) if header_end and start else b""
        self._pos, self._stop = start, stop

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        view = memoryview(buffer).cast("B")
        if self._header:
            n = min(len(view), len(self._header))
            view[:n] = self._header[:n]
            self._header = self._header[n:]
            return n
        want = min(len(view), self._stop - self._pos)
        if want <= 0:
            return 0
        if hasattr(os, "preadv"):
            n = os.preadv(self._fd, [view[:want]], self._pos)
        else:
            data = os.pread(self._fd, want, self._pos)
            n = len(data)
            view[:n] = data
        self._pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def open_range(path: str, part: TextRange) -> io.BufferedReader:
    """A range of the file as a binary stream of its own CSV file (header line, then rows)."""
    return io.BufferedReader(_RangeReader(path, part.start, part.stop, part.header_end), 1 << 20)
