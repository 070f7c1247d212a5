"""Bad rows: the dead-letter output, so that a row that cannot be read, transformed or encoded
never silently disappears.

A stage runs on a whole batch (the fast path). Only when it raises ConversionError is the batch
split in halves, again and again, until each failing row stands alone; the good rows are then
run once more as one batch. The rows that fail are described as JSON-able dicts (source file,
row, column, reason, stage, raw values), go to a tagged output, and are counted in Beam metrics.
The job writes them as JSON lines to `<output>/_errors/` and fails past a threshold
(`check_bad_rows`).

Plain functions, importable without Beam; the Beam transforms over them are in `beam.py`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from transforms.batch import TableBatch, source_rows, take_rows
from transforms.encode.schema import ConversionError
from transforms.fs import FileSystems
from transforms.names import ERRORS_DIR

__all__ = [
    "BAD_TAG",
    "ERRORS_DIR",
    "BadRowsError",
    "BadSink",
    "bad_row",
    "bad_row_key",
    "check_bad_rows",
    "count_bad",
    "error_line",
    "first_bad_row",
    "isolate_bad_rows",
    "row_values",
    "write_error_lines",
]

BAD_TAG = "bad"
ERRORS_PREFIX = "errors"  # the files in `_errors/`: errors-SSSSS-of-NNNNN.jsonl
ERRORS_SUFFIX = ".jsonl"
_METRICS_NAMESPACE = "tfrecord_etl"
_LOCATED = re.compile(r": row (\d+|\?): column '((?:[^'\\]|\\.)*)': ")

T = TypeVar("T")
BadSink = Callable[[dict[str, Any]], None]  # takes one dead-letter dict


class BadRowsError(ValueError):
    """More bad rows than the job allows; the error files are written, the manifest is not."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, decimal.Decimal | datetime.date | datetime.datetime | datetime.time):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return value


def row_values(table: pa.Table, index: int) -> dict[str, Any]:
    """The row `index` of `table` as JSON-able values (bytes as text, or base64 if not UTF-8)."""
    return _jsonable(table.slice(index, 1).to_pylist()[0])


def bad_row(
    source: str,
    row: int | None,
    column: str | None,
    reason: str,
    stage: str,
    values: Any,
) -> dict[str, Any]:
    """One dead-letter record (one JSON line in `_errors/`)."""
    return {
        "source": source,
        "row": row,
        "column": column,
        "stage": stage,
        "reason": reason,
        "values": values,
    }


def _failing_rows(
    batch: TableBatch, fn: Callable[[TableBatch], Any], indices: np.ndarray
) -> list[tuple[int, ConversionError]]:
    """Each row among `indices` that makes `fn` raise on its own, with its error (bisection)."""
    if not len(indices):  # no row to blame (fn of no rows may still raise: not a row's fault)
        return []
    try:
        fn(take_rows(batch, indices))
    except ConversionError as err:
        if len(indices) == 1:
            return [(int(indices[0]), err)]
        half = len(indices) // 2
        return _failing_rows(batch, fn, indices[:half]) + _failing_rows(batch, fn, indices[half:])
    return []


def isolate_bad_rows(
    batch: TableBatch, fn: Callable[[TableBatch], T], stage: str
) -> tuple[T | None, list[dict[str, Any]]]:
    """`fn(batch)`, or, when it raises ConversionError, `fn` of the rows that do not, and the
    rows that do as dead-letter records. None when no row is good."""
    try:
        return fn(batch), []
    except ConversionError:
        pass
    n = batch.table.num_rows
    failing = _failing_rows(batch, fn, np.arange(n, dtype=np.int64))
    if not failing:  # fails as a whole, yet no row fails alone: not a row's fault
        return fn(batch), []
    rows = source_rows(batch)
    bad = []
    for index, err in failing:
        message = str(err)
        match = _LOCATED.search(message)
        column = match.group(2) if match else None
        bad.append(
            bad_row(
                batch.source,
                int(rows[index]),
                column,
                message,
                stage,
                row_values(batch.table, index),
            )
        )
    good = np.setdiff1d(np.arange(n, dtype=np.int64), [i for i, _ in failing])
    result = fn(take_rows(batch, good)) if good.size else None
    return result, bad


def count_bad(stage: str, bad: Iterable[dict[str, Any]]) -> None:
    """Count dead-lettered rows in the Beam metrics `bad_rows` and `bad_rows_<stage>`."""
    n = sum(1 for _ in bad)
    if n:
        from apache_beam.metrics.metric import Metrics

        Metrics.counter(_METRICS_NAMESPACE, "bad_rows").inc(n)
        Metrics.counter(_METRICS_NAMESPACE, f"bad_rows_{stage}").inc(n)


def check_bad_rows(
    bad: int, good: int, max_bad_rows: int, max_bad_fraction: float, first: str, errors_dir: str
) -> None:
    """Raise BadRowsError when `bad` rows of `bad + good` are more than both limits allow."""
    total = bad + good
    allowed = max(max_bad_rows, math.floor(max_bad_fraction * total))
    if bad > allowed:
        raise BadRowsError(
            f"{bad} bad row(s) of {total}, more than allowed (max_bad_rows {max_bad_rows}, "
            f"max_bad_fraction {max_bad_fraction}); the first: {first}; every one is in "
            f"{errors_dir}"
        )


def bad_row_key(row: dict[str, Any]) -> tuple[str, int, str]:
    """What orders bad rows to pick the first one: source, row (-1 when unknown), reason."""
    return (row["source"], -1 if row["row"] is None else row["row"], row["reason"])


def first_bad_row(rows: Iterable[dict[str, Any]]) -> tuple[int, str]:
    """(number of bad rows, reason of the first by `bad_row_key`; "" when there is none): what
    `check_bad_rows` is given."""
    count, first = 0, None
    for row in rows:
        key = bad_row_key(row)
        count += 1
        if first is None or key < first:
            first = key
    return count, "" if first is None else first[2]


def error_line(row: dict[str, Any]) -> str:
    """One bad row as its JSON line in `_errors/` (no line break)."""
    return json.dumps(row, sort_keys=False, ensure_ascii=False, default=str)


def write_error_lines(directory: str, rows: Iterable[dict[str, Any]]) -> list[str]:
    """Bad rows -> `<directory>/errors-00000-of-00001.jsonl`, one JSON line each (what the Beam
    transform writes as one shard); no file when there is no row. Returns the files' paths."""
    lines = [error_line(row) for row in rows]
    if not lines:
        return []
    path = f"{directory.rstrip('/')}/{ERRORS_PREFIX}-00000-of-00001{ERRORS_SUFFIX}"
    with FileSystems.create(path) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return [path]
