"""A large CSV or JSON Lines file cut into byte ranges at row boundaries, so that several
workers read it.

A CSV row's start cannot be found by looking for a line break: a quoted value may hold line
breaks. `csv_ranges` reads the file once (memory-mapped) with a compiled state machine that
follows pyarrow's CSV parser (arrow/cpp/src/arrow/csv/parser.cc, `BlockParser::ParseLine`): a
quote opens a quoted value only at the start of a field (elsewhere it is a plain character),
a doubled quote inside one is a quote, the escape character (when set) takes the next byte as
it is, a line ends at "\\n", "\\r\\n" or a lone "\\r", an empty line is no row, and a last line
without a line break is a row. At the first row start past each multiple of the range size it
cuts, and it counts the rows before each cut: every range knows its first data row, so its
rows and bad rows carry the numbers they have when the file is read whole. The file is
scanned in pieces on every core at once, each piece as if a row started where it does; a
piece that guessed wrong (the bytes before it end inside a quoted value) is scanned again.

A JSON Lines row is a line (a JSON value holds no raw line break): `json_line_ranges` only
counts lines and rows (blank lines are lines, not rows), on every core with nothing to guess,
and each range knows its first line number too (bad lines are named by line).

A range is read as the file's header line (CSV) followed by its own bytes (`open_range`), so
the readers, their bad-row paths (Python's csv module, a second read as text, JSON line by
line) and pyarrow see a file like any other.

Only a local, uncompressed file larger than 1.5 range sizes is cut (CSV: `range_bytes`, 0: none
is; JSON Lines: JSON_RANGE_BYTES): a compressed file cannot be read from the middle, and a file
on an object store would be read twice. The scans read about 1.2 (CSV) and 1.5 (JSON Lines)
GB a second a thread here; tests/test_csv_ranges.py checks them against pyarrow, against one
pass and against the lines of generated files.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import os

import numpy as np
from numba import njit

__all__ = [
    "CHUNK_BYTES",
    "JSON_RANGE_BYTES",
    "TextRange",
    "csv_ranges",
    "json_line_ranges",
    "open_range",
    "scan_rows",
]

_BOM = b"\xef\xbb\xbf"
_LINE_START, _IN_FIELD, _IN_QUOTED = 0, 1, 2


@njit(cache=True, nogil=True)
def _scan(data, begin, end, state, delimiter, quote, escape, targets):  # noqa: ANN001, ANN202
    """The state machine over `data[begin:end]` from `state` (`end`: the data's end, or just
    after a "\\n", so no line break, doubled quote or escaped byte lies across it). For each
    of the sorted byte offsets `targets` (within the bytes), the first row start at or after it
    (-1: none before `end`) and the rows before that; the first row start (-1: none) and the
    rows before it; the end of the first row (-1: none); the rows; the state at `end`. Rows
    are counted from `begin`; a last line without a line break is left to the caller.
    `quote`, `escape`: -1 for none.

    Between the bytes that can change the state (a line break, the quote, the escape) the loop
    only steps: a quote outside a quoted value opens one only at the start of a field, which is
    where the byte before it is the delimiter (not escaped) or a line starts."""
    stops = np.zeros(256, np.uint8)  # the bytes that end a run outside a quoted value
    stops[10] = 1
    stops[13] = 1
    quoted_stops = np.zeros(256, np.uint8)  # ... inside one
    if quote >= 0:
        stops[quote] = 1
        quoted_stops[quote] = 1
    if escape >= 0:
        stops[escape] = 1
        quoted_stops[escape] = 1
    cuts = np.full(len(targets), -1, np.int64)
    rows_at = np.zeros(len(targets), np.int64)
    t = 0
    rows = 0
    first_start, rows_first = -1, 0
    first_end = -1
    escaped = -1  # the position of the last byte taken as it is after the escape
    i = begin
    while i < end:
        if state == _LINE_START:
            if first_start < 0:
                first_start, rows_first = i, rows
            while t < len(targets) and targets[t] <= i:
                cuts[t] = i
                rows_at[t] = rows
                t += 1
            c = data[i]
            if c == 13:  # an empty line: no row
                i += 1
                if i < end and data[i] == 10:
                    i += 1
                continue
            if c == 10:
                i += 1
                continue
            if quote >= 0 and c == quote:
                i += 1
                state = _IN_QUOTED
                continue
            state = _IN_FIELD
        if state == _IN_FIELD:
            while i < end and stops[data[i]] == 0:
                i += 1
            if i >= end:
                break
            c = data[i]
            i += 1
            if escape >= 0 and c == escape:
                escaped = i
                i += 1  # the next byte as it is (past the end: the last row ends there)
            elif c == 10 or c == 13:
                if c == 13 and i < end and data[i] == 10:
                    i += 1
                rows += 1
                if first_end < 0:
                    first_end = i
                state = _LINE_START
            elif i - 2 >= begin and data[i - 2] == delimiter and escaped != i - 2:
                state = _IN_QUOTED  # a quote starting a field
            continue
        # _IN_QUOTED
        while i < end and quoted_stops[data[i]] == 0:
            i += 1
        if i >= end:
            break
        c = data[i]
        i += 1
        if escape >= 0 and c == escape:
            escaped = i
            i += 1
        elif i < end and data[i] == quote:  # a doubled quote
            i += 1
        else:
            state = _IN_FIELD
    return cuts, rows_at, first_start, rows_first, first_end, rows, state


def _byte(char: str | None) -> int:
    if not char:
        return -1
    raw = char.encode("utf-8")
    if len(raw) != 1:
        raise ValueError(f"{char!r}: the CSV reader takes one-byte delimiters, quotes and escapes")
    return raw[0]


CHUNK_BYTES = 16 << 20  # the bytes one thread scans at a time


def _chunks(data: np.ndarray, begin: int, size: int) -> list[tuple[int, int]]:
    """[begin, len) cut into pieces of about `size` bytes, each but the last ending just after
    a "\\n" byte."""
    n = len(data)
    out, start = [], begin
    while n - start > size:
        at = start + size
        found = -1
        while at < n and found < 0:
            window = data[at : at + (1 << 20)]
            hits = np.flatnonzero(window == 10)
            found = at + int(hits[0]) if len(hits) else -1
            at += len(window)
        if found < 0:
            break
        out.append((start, found + 1))
        start = found + 1
    out.append((start, n))
    return out


def scan_rows(
    data: np.ndarray,
    delimiter: str,
    quote: str | None,
    escape: str | None,
    targets: np.ndarray,
    chunk_bytes: int = CHUNK_BYTES,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The state machine over a file's bytes (`data`, uint8; a leading UTF-8 BOM skipped):
    for each sorted byte offset of `targets`, the first row start at or after it (len(data):
    none) and the rows (the header included) before it; the end of the first row (-1: no row);
    the rows in all.

    The bytes are scanned in pieces of `chunk_bytes` on `threads` threads at once (the kernel
    lets go of the GIL), each piece as if a row started where it does (just after a "\\n");
    a piece whose bytes before it end elsewhere (inside a quoted value, or an escaped line
    break) is scanned again from the state they end in, so the result is the one a single pass
    gives."""
    n = len(data)
    begin = 3 if bytes(data[:3]) == _BOM else 0
    targets = np.asarray(targets, np.int64)
    codes = (_byte(delimiter), _byte(quote), _byte(escape))
    pieces = _chunks(data, begin, max(1, chunk_bytes))

    def scan(piece: tuple[int, int], state: int) -> tuple:
        a, b = piece
        low = -1 if a == begin else a  # the first piece: the targets before a BOM's end too
        mine = targets[(targets > low - 1) & ((targets < b) | (b == n))]
        return (*_scan(data, a, b, state, *codes, mine), mine)

    if threads is None:
        threads = _threads()
    if len(pieces) > 1 and threads > 1:
        with concurrent.futures.ThreadPoolExecutor(min(threads, len(pieces))) as pool:
            guessed = list(pool.map(lambda piece: scan(piece, _LINE_START), pieces))
    else:
        guessed = [scan(piece, _LINE_START) for piece in pieces]
    cuts = np.full(len(targets), n, np.int64)
    rows_at = np.zeros(len(targets), np.int64)
    pending: list[int] = []  # targets whose row start is in a later piece
    index = {int(v): k for k, v in reversed(list(enumerate(targets.tolist())))}
    state, rows, first_end = _LINE_START, 0, -1
    for piece, result in zip(pieces, guessed, strict=True):
        if state != _LINE_START:  # the guess was wrong: scanned again from the right state
            result = scan(piece, state)
        piece_cuts, piece_rows, first_start, rows_first, end_first, count, state, mine = result
        if first_start >= 0:
            for k in pending:
                cuts[k], rows_at[k] = first_start, rows + rows_first
            pending = []
        for j, target in enumerate(mine.tolist()):
            k = index[target]
            for kk in range(k, len(targets)):  # equal targets share the cut
                if targets[kk] != target:
                    break
                if piece_cuts[j] >= 0:
                    cuts[kk], rows_at[kk] = piece_cuts[j], rows + piece_rows[j]
                else:
                    pending.append(kk)
        if first_end < 0 and end_first >= 0:
            first_end = int(end_first)
        rows += int(count)
    if state != _LINE_START:  # a last line without a line break
        rows += 1
        if first_end < 0:
            first_end = n
    for k in pending:
        cuts[k], rows_at[k] = n, rows
    return cuts, rows_at, first_end, rows


@njit(cache=True, nogil=True)
def _scan_lines(data, begin, end, targets):  # noqa: ANN001, ANN202
    """JSON Lines over `data[begin:end]` (`begin` a line start, `end` the data's end or just
    after a "\\n"): for each of the sorted byte offsets `targets`, the first line start at or
    after it (-1: none before `end`), and the rows (lines with a byte other than space, tab,
    "\\r" or "\\n") and lines before it; the rows and lines in all."""
    cuts = np.full(len(targets), -1, np.int64)
    rows_at = np.zeros(len(targets), np.int64)
    lines_at = np.zeros(len(targets), np.int64)
    t = 0
    rows = 0
    lines = 0
    i = begin
    while i < end:
        while t < len(targets) and targets[t] <= i:
            cuts[t] = i
            rows_at[t] = rows
            lines_at[t] = lines
            t += 1
        blank = True
        while i < end and data[i] != 10:  # the line's leading blanks
            c = data[i]
            if c != 32 and c != 9 and c != 13:
                blank = False
                break
            i += 1
        while i < end and data[i] != 10:  # the rest of a line that is a row
            i += 1
        i += 1  # the line break (or past the end: a last line without one)
        lines += 1
        if not blank:
            rows += 1
    return cuts, rows_at, lines_at, rows, lines


JSON_RANGE_BYTES = 64 << 20  # a JSON Lines file past 1.5 x this is read as ranges of this size


def json_line_ranges(path: str, size: int | None = None) -> list[TextRange] | None:
    """The local JSON Lines file cut into ranges of about `size` bytes (default
    JSON_RANGE_BYTES) at line starts, or None when it is not worth cutting (at most 1.5 x
    `size`, or one line). A JSON Lines row is a line (a JSON
    value holds no raw line break), so the file's pieces are scanned at once with nothing to
    guess; each range knows its first row and first line number."""
    size = JSON_RANGE_BYTES if size is None else size
    total = os.path.getsize(path)
    if size <= 0 or total <= size * 3 // 2:
        return None
    data = np.memmap(path, dtype=np.uint8, mode="r")  # unmapped once no longer referenced
    pieces = _chunks(data, 0, CHUNK_BYTES)
    targets = np.arange(size, total, size, dtype=np.int64)

    def scan(piece: tuple[int, int]) -> tuple:
        a, b = piece
        mine = targets[(targets >= a) & ((targets < b) | (b == total))]
        return (*_scan_lines(data, a, b, mine), mine)

    with concurrent.futures.ThreadPoolExecutor(min(_threads(), len(pieces))) as pool:
        results = list(pool.map(scan, pieces))
    starts, rows_before, lines_before = [0], [0], [0]
    rows = lines = 0
    pending = False  # a target whose line starts in a later piece
    for (a, _), (cuts, rows_at, lines_at, piece_rows, piece_lines, _) in zip(
        pieces, results, strict=True
    ):
        found = [(int(c), int(r), int(n)) for c, r, n in zip(cuts, rows_at, lines_at, strict=True)]
        if pending and a > starts[-1]:
            starts.append(a)
            rows_before.append(rows)
            lines_before.append(lines)
        pending = False
        for cut, r, n in found:
            if cut < 0:
                pending = True
            elif cut > starts[-1]:
                starts.append(cut)
                rows_before.append(rows + r)
                lines_before.append(lines + n)
        rows += int(piece_rows)
        lines += int(piece_lines)
    starts_ok = [s for s in starts if s < total]
    if len(starts_ok) == 1:
        return None
    k = len(starts_ok)
    stops = [*starts_ok[1:], total]
    counts = [*rows_before[1:k], rows]
    return [
        TextRange(a, b, first, count - first, 0, line + 1)
        for a, b, first, count, line in zip(
            starts_ok, stops, rows_before[:k], counts, lines_before[:k], strict=True
        )
    ]


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


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


def csv_ranges(
    path: str, delimiter: str, quote: str | None, escape: str | None, header: bool, size: int
) -> list[TextRange] | None:
    """The local file cut into ranges of about `size` bytes at row starts, or None when it is
    not worth cutting (at most 1.5 x `size`, or a single range once cut) or cannot be (it starts
    with an empty line, which pyarrow's skipping of a header would count as a row)."""
    total = os.path.getsize(path)
    if size <= 0 or total <= size * 3 // 2:
        return None
    data = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        start = 3 if bytes(data[:3]) == _BOM else 0
        if data[start] in (10, 13):
            return None
        targets = np.arange(size, total, size, dtype=np.int64)
        cuts, rows_at, first_end, rows = scan_rows(data, delimiter, quote, escape, targets)
    finally:
        del data
    header_rows = 1 if header else 0
    header_end = first_end if header else 0
    starts = [0]
    before = [0]
    for cut, at in zip(cuts.tolist(), rows_at.tolist(), strict=True):
        if cut >= total or cut <= starts[-1] or (header and cut <= header_end):
            continue
        starts.append(cut)
        before.append(at - header_rows)
    if len(starts) == 1:
        return None
    stops = [*starts[1:], total]
    counts = [*before[1:], rows - header_rows]
    return [
        TextRange(a, b, first, count - first, header_end if i else 0)
        for i, (a, b, first, count) in enumerate(zip(starts, stops, before, counts, strict=True))
    ]


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
