"""Per-feature statistics of a batch, as mergeable accumulators: plain functions over Arrow.

`batch_statistics(table, specs, source, rows)` reads each feature's column the way the encoder
does (transforms/encode/columns.py: struct nulls carried down, `null_policy: default` filled,
values converted to what the records hold: float32 for float features, int64 for ints, dates
and timestamps, decimal text for decimals) and returns a `SplitStats`; `merge` adds another.
`SplitStats.add` adds a batch to a split's statistics with less work: only the values whose
priority is under a full sample's bound are taken into it (the result is the same).
Everything is computed on the whole batch with pyarrow.compute, numpy and compiled passes
(moments.py, values.py); the sketches are in sketches.py. A feature a row does not have (a
null under `null_policy: omit`) is missing; an empty list is present with no values; NaN values
are counted apart and left out of min, max, mean, std and the quantiles.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.columns import decimal_text, int64_values, leaf_array
from transforms.encode.features import nulls_specs, row_lengths_specs
from transforms.encode.lists import null_positions, row_lengths_array
from transforms.encode.schema import FLOAT, FeatureSpec, default_scalar, is_list_type
from transforms.stats.counter import (  # one feature's accumulator (also imported from here)
    SAMPLE_SIZE,
    TOP_CAPACITY,
    FeatureStats,
    stats_kind,
)
from transforms.stats.moments import moments
from transforms.stats.sketches import (
    HyperLogLog,
    Sample,
    TopK,
    fixed_priorities,
    position_priorities,
    row_keys,
)
from transforms.stats.values import count_values

__all__ = [
    "SAMPLE_SIZE",
    "TOP_CAPACITY",
    "FeatureStats",
    "SplitStats",
    "batch_statistics",
    "row_keys",
    "stats_kind",
]


@dataclasses.dataclass
class SplitStats:
    """The statistics of the rows of one split: rows, and an accumulator per feature."""

    rows: int = 0
    features: dict[str, FeatureStats] = dataclasses.field(default_factory=dict)

    def add(
        self,
        table: pa.Table,
        specs: Sequence[FeatureSpec],
        source: str,
        rows: np.ndarray,
    ) -> SplitStats:
        """Add the rows of `table` (of this split), whose source rows in `source` are `rows`;
        the same statistics as merging `batch_statistics` of it, with less work: only the
        values that can still enter a sample are taken."""
        keys = row_keys(source, rows)
        shared: dict[int | None, np.ndarray | None] = {}
        for spec in specs:
            arr = leaf_array(table, spec.path)
            self.features[spec.name] = feature_statistics(
                arr, spec, keys, self.features.get(spec.name), shared
            )
            for level, lengths in zip(spec.partition_levels, row_lengths_specs(spec), strict=True):
                self.features[lengths.name] = feature_statistics(
                    row_lengths_array(arr, level), lengths, keys, self.features.get(lengths.name)
                )
            found = null_positions(arr, spec)
            for positions, nulls in zip(found.values(), nulls_specs(spec, found), strict=True):
                self.features[nulls.name] = feature_statistics(
                    positions, nulls, keys, self.features.get(nulls.name)
                )
        self.rows += table.num_rows
        return self

    def merge(self, other: SplitStats) -> SplitStats:
        self.rows += other.rows
        for name, stats in other.features.items():
            if name in self.features:
                self.features[name].merge(stats)
            else:
                self.features[name] = stats
        return self


def _flatten(arr: pa.Array) -> pa.Array:
    """The innermost values of a list column (of the rows that are not null), in row order."""
    while is_list_type(arr.type):
        arr = pc.list_flatten(arr)
    return arr


def _element_rows(arr: pa.Array) -> np.ndarray:
    """The row of each innermost value of a list column."""
    rows: np.ndarray | None = None
    while is_list_type(arr.type):
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = parents if rows is None else rows[parents]
        arr = pc.list_flatten(arr)
    return rows if rows is not None else np.empty(0, np.int64)


def _numbers(spec: FeatureSpec, leaf: pa.Array) -> np.ndarray:
    """The values the records hold: float64 (keep_float64), float32 or int64; a uint64 column's
    own values (the records hold their bits as int64, the readers restore them)."""
    if pa.types.is_uint64(leaf.type):
        return pc.fill_null(leaf, 0).to_numpy(zero_copy_only=False)
    if spec.encoding == "float64_bytes":
        return pc.fill_null(pc.cast(leaf, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
    if spec.kind == FLOAT:
        if leaf.type != pa.float32():
            leaf = pc.cast(leaf, pa.float32(), safe=False)
        if leaf.null_count:  # a null inside a list: written as 0.0
            leaf = pc.fill_null(leaf, 0.0)
        return leaf.to_numpy(zero_copy_only=False)
    return int64_values(leaf)


def _below(priorities: np.ndarray, bound: int | None) -> np.ndarray | None:
    """The indices of the priorities under `bound` (None: all of them)."""
    return None if bound is None else np.flatnonzero(priorities < np.uint64(bound))


def _rows_below(
    keys: np.ndarray, bound: int | None, shared: dict[int | None, np.ndarray | None] | None
) -> np.ndarray | None:
    """`_below(keys, bound)`, kept in `shared` for the batch's other features."""
    if shared is None:
        return _below(keys, bound)
    if bound not in shared:
        shared[bound] = _below(keys, bound)
    return shared[bound]


def _add_numbers(
    stats: FeatureStats,
    values: np.ndarray,
    priorities: np.ndarray,
    candidates: np.ndarray | None,
) -> None:
    """`candidates`: the indices of the values that may enter the sample (None: all);
    `priorities`: theirs."""
    nans, zeros, count, low, high, negative, positive, mean, m2 = moments(values)
    stats.nans, stats.zeros, stats.count = nans, zeros, count
    stats.sample = Sample(SAMPLE_SIZE)
    if not count:
        return
    stats.min, stats.max, stats.mean, stats.m2 = low, high, mean, m2
    stats.infinities = (negative, positive)
    if candidates is not None:
        values = values[candidates]
    if nans:
        keep = ~np.isnan(values)
        values, priorities = values[keep], priorities[keep]
    stats.sample.add(values, priorities)


def _add_every_row_numbers(
    into: FeatureStats,
    arr: pa.Array,
    spec: FeatureSpec,
    keys: np.ndarray,
    shared: dict[int | None, np.ndarray | None] | None,
) -> None:
    """Add a batch of a numeric feature with one value in every row to `into`, which has a
    sample: what `feature_statistics` does, without a batch accumulator to merge."""
    values = _numbers(spec, arr)
    stats = moments(values)
    into.add_moments(*stats)
    n = len(values)
    into.present += n
    into.values += n
    if n:
        into.min_values = into.max_values = 1
    candidates = _rows_below(keys, into.sample.bound(), shared)
    priorities = keys
    if candidates is not None:
        values, priorities = values[candidates], keys[candidates]
    if stats[0]:  # NaNs: left out of the sample
        keep = ~np.isnan(values)
        values, priorities = values[keep], priorities[keep]
    into.sample.add(values, priorities)


def _add_strings(
    stats: FeatureStats, leaf: pa.Array, into: FeatureStats, fill: bool = False
) -> None:
    """The batch's counters into `stats`; its distinct values straight into the sketches of
    `into` when it has them (else new ones in `stats`). With `fill` (a list's values) a null
    counts as the empty value the records hold."""
    if pa.types.is_null(leaf.type):
        return
    if pa.types.is_decimal(leaf.type):
        leaf = decimal_text(leaf)
    if fill and leaf.null_count:  # a list's null elements: written as empty values
        if pa.types.is_fixed_size_binary(leaf.type):
            leaf = pc.cast(leaf, pa.binary())
        leaf = pc.fill_null(leaf, pa.scalar("", leaf.type))
    # the distinct values (for a string's top values), their counts and hashes, the lengths
    counted = count_values(leaf, keep_values=stats.kind == "string")
    stats.length_sum = counted.length_sum
    stats.min_length, stats.max_length = counted.min_length, counted.max_length
    if into.distinct is None:
        stats.distinct = HyperLogLog()
    distinct = stats.distinct if into.distinct is None else into.distinct
    distinct.add_hashes(counted.hashes)
    if counted.values is not None:  # a string feature: its top values
        if into.top is None:
            stats.top = TopK(TOP_CAPACITY)
        top = stats.top if into.top is None else into.top
        top.add(counted.values, counted.counts, counted.hashes)


def _fixed_count(spec: FeatureSpec) -> int | None:
    """The values every present row has, for a fixed shape; None when they vary."""
    if spec.shape is None or any(d < 0 for d in spec.shape):
        return None
    return math.prod(spec.shape)


def feature_statistics(
    arr: pa.Array,
    spec: FeatureSpec,
    keys: np.ndarray,
    into: FeatureStats | None = None,
    shared: dict[int | None, np.ndarray | None] | None = None,
) -> FeatureStats:
    """One feature's statistics over a batch, merged into `into` (a new accumulator when
    None), which is returned. `arr`: its column (`leaf_array`); `keys`: the rows' keys
    (`row_keys`). Only values whose priority is under the bound of `into`'s sample are taken
    into it (a full sample would drop the others); `shared`: {bound: the rows whose key is
    under it}, kept across the features of the batch that every row has."""
    if spec.null_policy == "default" and arr.null_count:
        arr = pc.fill_null(arr, default_scalar(spec.default, arr.type))
    if into is not None and into.sample is not None and spec.shape == () and not arr.null_count:
        _add_every_row_numbers(into, arr, spec, keys, shared)  # the common case, directly
        return into
    part = FeatureStats(stats_kind(spec))
    into = FeatureStats(part.kind) if into is None else into
    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    part.present = n if valid is None else int(np.count_nonzero(valid))
    part.missing = n - part.present
    present_keys = keys if valid is None else keys[valid]
    fixed = _fixed_count(spec)
    bound = None if into.sample is None else into.sample.bound()
    if spec.shape == ():  # one value per present row
        leaf = arr if valid is None else arr.filter(pa.array(valid))
        if valid is None:
            candidates = _rows_below(keys, bound, shared)
        else:
            candidates = _below(present_keys, bound)
        priorities = present_keys if candidates is None else present_keys[candidates]
    else:
        leaf = _flatten(arr)
        if fixed is not None:  # every present row has `fixed` values, in row order
            priorities, candidates = fixed_priorities(present_keys, fixed, bound)
        else:
            element_rows = _element_rows(arr)
            priorities = position_priorities(keys, element_rows)
            candidates = _below(priorities, bound)
            if candidates is not None:
                priorities = priorities[candidates]
            counts = np.bincount(element_rows, minlength=n)
            if valid is not None:
                counts = counts[valid]
            sample = into.value_counts
            chosen = _below(present_keys, None if sample is None else sample.bound())
            part.value_counts = Sample(SAMPLE_SIZE)
            if chosen is None:
                part.value_counts.add(counts, present_keys)
            else:
                part.value_counts.add(counts[chosen], present_keys[chosen])
            if len(counts):
                part.min_values, part.max_values = int(counts.min()), int(counts.max())
    part.values = len(leaf)
    if fixed is not None and part.present:
        part.min_values = part.max_values = fixed
    if part.kind == "numeric":
        _add_numbers(part, _numbers(spec, leaf), priorities, candidates)
    else:
        _add_strings(part, leaf, into, fill=spec.shape != ())
    into.merge(part)
    return into


def batch_statistics(
    table: pa.Table,
    specs: list[FeatureSpec] | tuple[FeatureSpec, ...],
    source: str,
    rows: np.ndarray,
) -> SplitStats:
    """The statistics of every feature over the rows of `table` (all of one split), whose
    source rows in `source` are `rows`."""
    return SplitStats().add(table, specs, source, rows)
