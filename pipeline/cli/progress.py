"""The progress of a local run, shown while it runs: rows and bytes written per split, the rate,
and an ETA from the rows the plan reads.

The shard writers report what they have written in small files under a directory of the output
(transforms/write/progress.py); a thread of the launcher polls them and shows:
- on a terminal, one live line on stderr, rewritten in place twice a second;
- elsewhere, a plain line on stderr every LINE_SECONDS;
- with `--log-format json`, a JSON object (`"event": "progress"`) every LINE_SECONDS;
and a last one, with the final counts, when the job ends. The directory is deleted then.

The planned rows: exact for Parquet read by row group (the footers' row counts); estimated from
bytes for CSV (the first file's bytes per line) and for Parquet files planned from the first
footer only (its rows per byte on disk). Rows a filter drops or a bad row set aside are never
written, so the fraction may end short of 100%.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from pipeline.cli.joblog import JobLog
from pipeline.job.plan import JobPlan
from transforms.fs import FileSystems
from transforms.read.parquet_reader import parquet_footer
from transforms.write.progress import (
    SplitProgress,
    read_progress,
    total_progress,
)
from transforms.write.sizing import csv_bytes_per_row

__all__ = [
    "LINE_SECONDS",
    "LIVE_SECONDS",
    "MODES",
    "ProgressWatch",
    "Snapshot",
    "planned_rows",
    "progress_fields",
    "progress_line",
]

LIVE_SECONDS = 0.5  # a terminal's line is redrawn this often
LINE_SECONDS = 5.0  # a log line (text or JSON) this often
MODES = ("tty", "lines", "json")

# The in-process engine forks its workers while the watch's thread runs. A process forked while
# that thread wrote a line would start with the stream's lock held by a thread it does not have,
# and its first write to stderr would wait forever. The thread reports under this lock, and a
# fork (os.fork, multiprocessing's "fork") takes it first, as `logging` does for its handlers.
_FORK_GUARD = threading.Lock()
os.register_at_fork(
    before=_FORK_GUARD.acquire,
    after_in_parent=_FORK_GUARD.release,
    after_in_child=_FORK_GUARD.release,
)


def planned_rows(plan: JobPlan) -> tuple[int, bool]:
    """(rows the job reads, whether the count is exact)."""
    work = plan.work
    if work and all(w.num_rows is not None for w in work):
        return sum(w.num_rows for w in work), True
    first = work[0]
    if plan.fmt == "parquet":  # whole files, the first footer only: its rows per byte on disk
        per_byte = parquet_footer(first.path).num_rows / max(first.source_bytes, 1)
    else:
        per_byte = 1.0 / csv_bytes_per_row(first.path, plan.config.csv.header)
    return round(sum(w.source_bytes for w in work) * per_byte), False


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the writers reported `elapsed` seconds into the run, against the plan."""

    splits: Mapping[str, SplitProgress]
    elapsed: float
    planned: int | None = None
    exact: bool = True

    @property
    def total(self) -> SplitProgress:
        return total_progress(self.splits)

    @property
    def rate(self) -> float:
        """Rows written per second, on average since the start."""
        return self.total.rows / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def fraction(self) -> float | None:
        if not self.planned:
            return None
        return min(1.0, self.total.rows / self.planned)

    @property
    def eta(self) -> float | None:
        """Seconds left at the average rate; None before the first row or past the plan."""
        rows = self.total.rows
        if not self.planned or rows == 0 or rows >= self.planned:
            return None
        return (self.planned - rows) / self.rate


def _size(nbytes: float) -> str:
    """Bytes for people: 512 B, 156 KiB, 3.0 MiB, 1.20 GiB."""
    for unit, scale, digits in (("GiB", 1 << 30, 2), ("MiB", 1 << 20, 1), ("KiB", 1 << 10, 0)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.{digits}f} {unit}"
    return f"{nbytes:,.0f} B"


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_line(snap: Snapshot, splits: tuple[str, ...] = (), done: bool = False) -> str:
    """`train 12,000 rows 3.1 MiB | test 3,000 rows 812 KiB | 15,000 rows (~42%) 5,100 rows/s
    1.3 MiB/s | ETA ~0:00:21`: `~` where the planned rows are an estimate. `done` (the last
    line, the job ended): no ETA but the elapsed time, and the share of the planned rows only
    where they were counted, not estimated (a CSV's rows estimated from its first bytes could
    leave a finished job at `~50%`)."""
    names = list(splits) + [s for s in snap.splits if s not in splits]
    parts = []
    for name in names:
        counts = snap.splits.get(name, SplitProgress())
        parts.append(f"{name} {counts.rows:,} rows {_size(counts.bytes)}")
    total = snap.total
    approx = "" if snap.exact else "~"
    estimate = done and not snap.exact
    share = "" if snap.fraction is None or estimate else f" ({approx}{snap.fraction:.0%})"
    speed = total.bytes / snap.elapsed if snap.elapsed > 0 else 0.0
    parts.append(f"{total.rows:,} rows{share} {snap.rate:,.0f} rows/s {_size(speed)}/s")
    eta = None if done else snap.eta
    parts.append(f"{_clock(snap.elapsed)}" if eta is None else f"ETA {approx}{_clock(eta)}")
    return " | ".join(parts)


def progress_fields(snap: Snapshot, done: bool) -> dict[str, Any]:
    """The fields of a JSON progress line."""
    total = snap.total
    return {
        "rows": total.rows,
        "bytes": total.bytes,
        "splits": {n: {"rows": c.rows, "bytes": c.bytes} for n, c in snap.splits.items()},
        "planned_rows": snap.planned,
        "planned_exact": snap.exact,
        "rows_per_s": round(snap.rate, 1),
        "elapsed_s": round(snap.elapsed, 3),
        "eta_s": None if snap.eta is None or done else round(snap.eta, 1),
        "done": done,
    }


class ProgressWatch:
    """A context manager around a local run: a thread that polls the writers' reports in
    `directory` and shows them in `mode` ("tty", "lines" or "json"); on exit, the final line,
    then the directory is deleted. Mode None: nothing (`directory` is None, no reports)."""

    def __init__(
        self,
        output: str,
        mode: str | None,
        log: JobLog,
        planned: tuple[int, bool] | None = None,
        splits: tuple[str, ...] = (),
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"progress mode {mode!r} is not one of {list(MODES)}")
        self.mode = mode
        self.directory = None
        if mode is not None:
            self.directory = FileSystems.join(output, f"beam-temp-progress-{uuid.uuid4().hex[:16]}")
        self._log = log
        self._planned, self._exact = planned if planned else (None, True)
        self._splits = splits
        self._interval = interval or (LIVE_SECONDS if mode == "tty" else LINE_SECONDS)
        self._clock = clock
        self._seen: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = clock()

    def snapshot(self) -> Snapshot:
        splits = read_progress(self.directory, self._seen)
        for name in self._splits:
            splits.setdefault(name, SplitProgress())
        elapsed = self._clock() - self._start
        return Snapshot(splits, elapsed, self._planned, self._exact)

    def show(self, snap: Snapshot, done: bool = False) -> None:
        log = self._log
        if self.mode == "json":
            log.event("progress", "", **progress_fields(snap, done))
        elif self.mode == "lines":
            log.event("progress", f"progress: {progress_line(snap, self._splits, done)}")
        elif self.mode == "tty":
            width = shutil.get_terminal_size().columns
            line = progress_line(snap, self._splits, done)[: max(width - 1, 20)]
            stream = log.stream
            stream.write(f"\r{line}\x1b[K" + ("\n" if done else ""))
            stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with _FORK_GUARD:  # no fork while a line is read or written (above)
                self.show(self.snapshot())

    def __enter__(self) -> ProgressWatch:
        self._start = self._clock()
        if self.mode is not None:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.show(self.snapshot(), done=True)
        self._remove()

    def _remove(self) -> None:
        """Delete the reports and their directory (a leftover is cleared by the next run, as
        any `beam-temp-*` of the output is)."""
        try:
            found = FileSystems.match([FileSystems.join(self.directory, "*")])[0].metadata_list
            if found:
                FileSystems.delete([m.path for m in found])
            if FileSystems.exists(self.directory):
                FileSystems.delete([self.directory])
        except Exception as err:  # the run's result stands
            text = f"warning: progress reports not removed: {err}"
            self._log.event("message", text, level="warning", message=text)
