"""The statistics added a batch at a time (`StatisticsAccumulator`, `SplitStats.add`: only
values under a full sample's bound are taken) against the same rows at once, and the compiled
parts (string counts, moments, fixed-list priorities) against pyarrow and numpy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import plan_specs

from transforms.batch import TableBatch
from transforms.hashing import hash_column
from transforms.stats.accumulator import StatisticsAccumulator
from transforms.stats.features import SAMPLE_SIZE, batch_statistics
from transforms.stats.moments import _moments, moments
from transforms.stats.proto import to_proto
from transforms.stats.sketches import GOLDEN, Sample, fixed_priorities
from transforms.stats.values import count_values

ROWS = 3 * SAMPLE_SIZE + 500  # samples fill, then take only values under their bound


def _table(n: int = ROWS) -> pa.Table:
    """Every kind of feature, with nulls, NaN, zeros, fixed and variable lists, strings."""
    rng = np.random.default_rng(5)
    floats = rng.normal(size=n)
    floats[rng.integers(0, n, 40)] = np.nan
    floats[::9] = 0.0
    lengths = rng.integers(0, 4, n)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    ints = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(-5, 5, offsets[-1])))
    ints = pc.if_else(pa.array(rng.random(n) < 0.1), pa.nulls(n, ints.type), ints)
    words = pa.array([f"w{i}" for i in rng.zipf(1.5, n) % 3000])
    words = pc.if_else(pa.array(rng.random(n) < 0.05), pa.nulls(n, pa.string()), words)
    return pa.table(
        {
            "id": pa.array(rng.integers(0, 1_000_000, n)),
            "x": pa.array(floats, pa.float32()),
            "maybe": pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.normal(size=3 * n), pa.float32()), 3
            ),
            "ints": ints,
            "word": words,
            "blob": pa.array([bytes([i % 251]) * (i % 3) for i in range(n)], pa.binary()),
        }
    )


def _sample_of(stats: Sample | None) -> list[tuple[int, float]]:
    if stats is None:
        return []
    return sorted(zip(stats.priorities.tolist(), stats.values.tolist(), strict=True))


def test_accumulator_equals_the_whole_in_any_order_and_grouping() -> None:
    table = _table()
    specs = plan_specs(table)
    whole = batch_statistics(table, specs, "in.parquet", np.arange(table.num_rows))
    bounds = [0, 900, 4000, 4001, 7000, 9500, 11000, table.num_rows]
    parts = list(itertools.pairwise(bounds))
    first, second = StatisticsAccumulator(specs), StatisticsAccumulator(specs)
    for i, (a, b) in enumerate(reversed(parts)):  # out of order, in two accumulators
        batch = TableBatch(table.slice(a, b - a), "in.parquet", a)
        (first if i % 2 else second).add("train", batch)
    merged = dict(first.merge(second).items())["train"]
    assert merged.rows == whole.rows == table.num_rows
    for spec in specs:
        a, b = whole.features[spec.name], merged.features[spec.name]
        for name in ("present", "missing", "values", "min_values", "max_values", "count"):
            assert getattr(a, name) == getattr(b, name), (spec.name, name)
        for name in ("zeros", "nans", "infinities", "min", "max", "length_sum"):
            assert getattr(a, name) == getattr(b, name), (spec.name, name)
        assert math.isclose(a.mean, b.mean, rel_tol=1e-9, abs_tol=1e-12), spec.name
        assert math.isclose(a.m2, b.m2, rel_tol=1e-9, abs_tol=1e-9), spec.name
        # the same bottom-k samples: the k smallest priorities whatever the batches
        assert _sample_of(a.sample) == _sample_of(b.sample), spec.name
        assert _sample_of(a.value_counts) == _sample_of(b.value_counts), spec.name
        if a.sample is not None and a.count >= SAMPLE_SIZE:
            assert len(b.sample.values) == SAMPLE_SIZE
        if a.top is not None:
            assert a.top.top(3000) == b.top.top(3000) and a.top.exact == b.top.exact
        if a.distinct is not None:
            assert a.distinct.estimate() == b.distinct.estimate(), spec.name
    a, b = to_proto("train", whole, specs), to_proto("train", merged, specs)
    for fa, fb in zip(a.datasets[0].features, b.datasets[0].features, strict=True):
        if fa.WhichOneof("stats") == "num_stats":
            for field in ("mean", "std_dev"):  # summed in another order: equal to rounding
                fa.num_stats.ClearField(field)
                fb.num_stats.ClearField(field)
        assert fa == fb, fa.path.step[0]


@pytest.mark.parametrize(
    "arr",
    [
        pa.array(["b", None, "a", "b", "", "ccc", "a", "b"]),
        pa.array(["b", None, "a", "b", "", "ccc"], pa.large_string()).slice(1, 4),
        pa.array([b"\x00", b"", b"\x00\x01", None, b"\x00"], pa.binary()),
        pa.array([f"v{i % 997}" for i in range(5000)]),  # the table grows past its first size
        pa.array([], pa.string()),
        pa.array([None, None], pa.string()),
    ],
)
def test_count_values_equals_pyarrow(arr: pa.Array) -> None:
    counted = count_values(arr)
    expected = pc.value_counts(arr.drop_null())
    assert counted.values.to_pylist() == expected.field("values").to_pylist()
    assert counted.counts.tolist() == expected.field("counts").to_pylist()
    assert counted.hashes.tolist() == hash_column(expected.field("values")).tolist()
    lengths = pc.binary_length(arr.drop_null())
    assert counted.length_sum == (pc.sum(lengths).as_py() or 0)
    assert counted.min_length == pc.min(lengths).as_py()
    assert counted.max_length == pc.max(lengths).as_py()
    without = count_values(arr, keep_values=False)  # what a bytes feature asks for
    assert without.values is None and without.hashes.tolist() == counted.hashes.tolist()
    assert (without.length_sum, without.min_length, without.max_length) == (
        counted.length_sum,
        counted.min_length,
        counted.max_length,
    )


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(1).gamma(2.0, 10.0, 5000).astype(np.float32),
        np.random.default_rng(2).integers(-(10**12), 10**12, 5000),
        np.array([0.0, -0.0, 3.5, 0.0]),
        np.array([1.0, np.nan, np.inf, -2.0, 0.0]),
        np.array([np.nan, np.nan]),
        np.array([], np.float32),
    ],
)
def test_moments_fast_path_equals_the_checked_one(values: np.ndarray) -> None:
    fast, checked = moments(values), _moments(values)
    assert fast[:7] == checked[:7]
    for x, y in zip(fast[7:], checked[7:], strict=True):
        assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9)


def test_fixed_priorities_under_a_bound() -> None:
    keys = np.random.default_rng(3).integers(0, 2**63, 1000, dtype=np.uint64) * np.uint64(2)
    everything, none = fixed_priorities(keys, 4, None)
    steps = np.arange(4, dtype=np.uint64) * GOLDEN
    assert none is None and (everything == (keys[:, None] + steps).ravel()).all()
    bound = 2**62
    priorities, index = fixed_priorities(keys, 4, bound)
    assert index.tolist() == np.flatnonzero(everything < np.uint64(bound)).tolist()
    assert (priorities == everything[index]).all()
