"""Arrow rows -> serialized tf.train.SequenceExamples: the columns prepared as for Examples
(transforms/encode/columns.py), then one call of the sequence kernel per batch.

- `encode_list_column`: one SequenceExample per row, the elements of a `list<struct>` column
  its steps (no grouping; runs in the encode stage of every batch).
- `encode_groups`: the rows of many sequences (a bucket of the grouped write, from any number
  of source files), sorted into groups, each group checked (a context column with more than one
  value makes every row of its group a bad row) and encoded; a group with a value that cannot
  be written is found by bisection and becomes bad rows too, the rest is encoded.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.deadletter import bad_row, row_values
from transforms.encode.columns import leaf_array, to_kernel_column
from transforms.encode.kernel.sequence import encode_sequences
from transforms.encode.records import BatchStats, EncodedBatch
from transforms.encode.schema import ConversionError, FeatureSpec
from transforms.sequence.groups import context_mismatches, group_bounds, group_order
from transforms.sequence.layout import SequenceLayout

__all__ = ["GroupRows", "encode_groups", "encode_list_column"]

STAGE = "sequence"
_AT = "\0rows"  # the source name in errors until a row is placed (see _placed)
_ROW = re.compile(re.escape(_AT) + r": row (\d+): ")


def _kernel_columns(
    table: pa.Table, specs: Sequence[FeatureSpec], source: str, first_row: int, rows: Any
) -> tuple[list, dict[str, int]]:
    columns, nulls = [], {}
    for spec in specs:
        column, count = to_kernel_column(table, spec, source, first_row, rows)
        columns.append(column)
        nulls[spec.name] = count
    return columns, nulls


def encode_list_column(
    table: pa.Table,
    layout: SequenceLayout,
    source: str,
    first_row: int,
    framed: bool = False,
    rows: np.ndarray | None = None,
) -> tuple[EncodedBatch, BatchStats]:
    """One SequenceExample per row of `table`: the context columns, and the elements of the
    list column as steps (a null list: no feature list at all; a null element or field: an
    empty Feature). Errors name `source` and the row (`first_row` + index, or `rows[index]`)."""
    name = layout.options.column
    context, nulls = _kernel_columns(table, layout.context, source, first_row, rows)
    arr = leaf_array(table, (name,))
    has_steps = arr.is_valid().to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    group_off = np.zeros(table.num_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=group_off[1:])
    steps_table = pa.table({name: pc.list_flatten(arr)})
    if rows is None:
        rows = np.arange(first_row, first_row + table.num_rows, dtype=np.int64)
    step_rows = np.repeat(np.asarray(rows, dtype=np.int64), lengths)
    steps, step_nulls = _kernel_columns(steps_table, layout.steps, source, 0, step_rows)
    buffer, offsets = encode_sequences(context, steps, group_off, has_steps, framed)
    nulls.update(step_nulls)
    nulls[name] = int(table.num_rows - np.count_nonzero(has_steps))
    stats = BatchStats(table.num_rows, nulls, steps=int(group_off[-1]))
    return EncodedBatch(buffer, offsets, framed, source=source, first_row=first_row), stats


@dataclasses.dataclass(frozen=True)
class GroupRows:
    """Rows of many sequences, from any number of files: `sources[source_index[i]]` and
    `rows[i]` say where row i came from."""

    table: pa.Table
    rows: np.ndarray  # int64: the source row of each row
    source_index: np.ndarray  # int64: index into `sources` of each row
    sources: tuple[str, ...]

    def take(self, indices: np.ndarray) -> GroupRows:
        indices = np.asarray(indices, dtype=np.int64)
        return GroupRows(
            self.table.take(pa.array(indices, pa.int64())),
            self.rows[indices],
            self.source_index[indices],
            self.sources,
        )

    def where(self, i: int) -> str:
        return f"{self.sources[int(self.source_index[i])]}: row {int(self.rows[i])}"

    def bad(self, i: int, column: str | None, reason: str) -> dict[str, Any]:
        source = self.sources[int(self.source_index[i])]
        row = int(self.rows[i])
        return bad_row(source, row, column, reason, STAGE, row_values(self.table, i))


def _key_text(rows: GroupRows, i: int, group_by: Sequence[str]) -> str:
    values = row_values(rows.table.select(list(group_by)), i)
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _mismatch_rows(
    rows: GroupRows, bounds: np.ndarray, group: int, name: str, at: int, group_by: Sequence[str]
) -> list[dict[str, Any]]:
    first = int(bounds[group])
    path = name.split(".")
    first_value = row_values(rows.table, first).get(path[0])
    other_value = row_values(rows.table, at).get(path[0])
    out = []
    for i in range(first, int(bounds[group + 1])):
        reason = (
            f"{rows.where(i)}: column {name!r}: a context column differs within the sequence "
            f"({_key_text(rows, first, group_by)}): {other_value!r} at {rows.where(at)}, "
            f"{first_value!r} at {rows.where(first)}; every row of the sequence is a bad row"
        )
        out.append(rows.bad(i, name, reason))
    return out


def _placed(err: ConversionError, rows: GroupRows) -> tuple[str | None, str]:
    """The error's message with the row it names (an index into `rows`) put back in its file."""
    message = str(err)
    match = _ROW.search(message)
    if match is None:
        return None, message
    i = int(match.group(1))
    column = re.search(r"column '((?:[^'\\]|\\.)*)'", message)
    return (column.group(1) if column else None), _ROW.sub(rows.where(i) + ": ", message, 1)


def _encode_sorted(
    table: pa.Table, bounds: np.ndarray, layout: SequenceLayout, framed: bool, index: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, int]]:
    """Records of the groups of `table` (sorted, groups at `bounds`); raises ConversionError
    naming `index[i]` (source _AT) for a value of row i that cannot be written."""
    starts = bounds[:-1]
    first = table.take(pa.array(starts, pa.int64()))
    context, nulls = _kernel_columns(first, layout.context, _AT, 0, index[starts])
    steps, step_nulls = _kernel_columns(table, layout.steps, _AT, 0, index)
    nulls.update(step_nulls)
    return encode_sequences(context, steps, bounds, None, framed), nulls


def _bisect(
    encode: Callable[[np.ndarray], Any], groups: np.ndarray
) -> tuple[list[tuple[int, ConversionError]], Any]:
    """Groups that make `encode` raise on their own, with their errors; and the result of
    `encode` over the others."""
    try:
        return [], encode(groups)
    except ConversionError as err:
        if len(groups) == 1:
            return [(int(groups[0]), err)], None
    failing: list[tuple[int, ConversionError]] = []
    half = len(groups) // 2
    for part in (groups[:half], groups[half:]):
        bad, _ = _bisect(encode, part)
        failing += bad
    good = np.setdiff1d(groups, [g for g, _ in failing])
    return failing, (encode(good) if good.size else None)


def encode_groups(
    rows: GroupRows, layout: SequenceLayout, framed: bool = True
) -> tuple[EncodedBatch | None, BatchStats, list[dict[str, Any]]]:
    """The SequenceExamples of every group in `rows` (in key order), their stats and the bad
    rows: each row of a group whose context is not constant, or that holds a value the
    encoder cannot write. None when no group is left."""
    options = layout.options
    rows = rows.take(group_order(rows.table, options.group_by, options.order_by))
    bounds = group_bounds(rows.table, options.group_by)
    bad: list[dict[str, Any]] = []
    broken: set[int] = set()
    for group, name, at in _checked(rows, bounds, layout):
        bad += _mismatch_rows(rows, bounds, group, name, at, options.group_by)
        broken.add(group)

    def encode(groups: np.ndarray) -> tuple[int, int, Any]:
        """(sequences, steps, (records, nulls)) of `groups`; errors name indices into rows."""
        if len(groups) == len(bounds) - 1:  # every group: no copy
            index, sub, table = np.arange(rows.table.num_rows), bounds, rows.table
        else:
            index = np.concatenate([np.arange(bounds[g], bounds[g + 1]) for g in groups])
            sub = np.zeros(len(groups) + 1, dtype=np.int64)
            np.cumsum(np.diff(bounds)[groups], out=sub[1:])
            table = rows.table.take(pa.array(index, pa.int64()))
        return len(groups), len(index), _encode_sorted(table, sub, layout, framed, index)

    groups = np.array([g for g in range(len(bounds) - 1) if g not in broken], dtype=np.int64)
    failing, result = _bisect(encode, groups) if groups.size else ([], None)
    for g, err in failing:
        column, message = _placed(err, rows)
        for i in range(int(bounds[g]), int(bounds[g + 1])):
            reason = message
            if not message.startswith(rows.where(i) + ":"):
                reason = f"{rows.where(i)}: in the same sequence as a bad row: {message}"
            bad.append(rows.bad(i, column, reason))
    if result is None:
        return None, BatchStats(0, {}), bad
    count, steps, ((buffer, offsets), nulls) = result
    stats = BatchStats(count, nulls, steps=steps)
    return EncodedBatch(buffer, offsets, framed), stats, bad


def _checked(
    rows: GroupRows, bounds: np.ndarray, layout: SequenceLayout
) -> list[tuple[int, str, int]]:
    """context_mismatches, where a value that cannot be written is left to the encoder."""
    found = []
    for spec in layout.checked_context():
        try:
            found += context_mismatches(rows.table, bounds, [spec], _AT, np.arange(len(rows.rows)))
        except ConversionError:
            continue  # the encoder finds the row and isolates its group
    first: dict[int, tuple[int, str, int]] = {}
    for g, name, at in found:
        first.setdefault(g, (g, name, at))
    return sorted(first.values())
