"""Statistics computed as the job encodes (transforms/stats/): each value against numpy and
Python over the records themselves, merging, the sketches' error bounds, the proto files."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from conftest import decode_rows, plan_specs
from stats_oracle import assert_same_statistics, check_statistics, expected_statistics
from tensorflow_metadata.proto.v0 import statistics_pb2
from test_reader import CONFIG, make_table

from transforms.hashing import hash_column
from transforms.stats.features import SplitStats, batch_statistics
from transforms.stats.proto import to_proto, write_statistics
from transforms.stats.sketches import HyperLogLog, Sample, TopK, mix64

COLUMNS = {
    **CONFIG["columns"],
    "i32": {"null_policy": "default", "default": 7},  # a null is written as 7: not missing
}


def _extra_table(n: int = 300) -> pa.Table:
    """Zeros, NaN, infinities, repeated strings, binary values, empty and null lists."""
    rng = np.random.default_rng(3)
    floats = rng.normal(size=n)
    floats[::7] = 0.0
    floats[5] = np.nan
    floats[9] = -np.inf
    words = [None if i % 11 == 0 else f"w{i % 13}" for i in range(n)]
    lists = [None if i % 5 == 0 else [int(x) for x in rng.integers(-3, 3, i % 4)] for i in range(n)]
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array(floats, pa.float64()),
            "word": pa.array(words, pa.string()),
            "blob": pa.array([bytes([i % 5]) * (i % 3) for i in range(n)], pa.binary()),
            "ints": pa.array(lists, pa.list_(pa.int64())),
        }
    )


@pytest.mark.parametrize("case", ["every_type", "zeros_nan_strings"])
def test_batch_statistics_equal_the_records(case: str) -> None:
    if case == "every_type":
        table, _ = make_table()
        columns = COLUMNS
    else:
        table, columns = _extra_table(), {}
    specs = plan_specs(table, columns)
    stats = batch_statistics(table, specs, "in.parquet", np.arange(table.num_rows))
    proto = to_proto("train", stats, specs)
    expected = expected_statistics(decode_rows(table, columns), specs)
    assert proto.datasets[0].num_examples == table.num_rows
    check_statistics(proto.datasets[0], expected)


def test_batches_merge_to_the_whole() -> None:
    table, _ = make_table()
    specs = plan_specs(table, COLUMNS)
    rows = np.arange(table.num_rows)
    whole = batch_statistics(table, specs, "in.parquet", rows)
    merged = SplitStats()
    for start, stop in ((0, 7), (7, 30), (30, table.num_rows)):
        part = batch_statistics(
            table.slice(start, stop - start), specs, "in.parquet", rows[start:stop]
        )
        merged.merge(part)
    assert_same_statistics(to_proto("train", whole, specs), to_proto("train", merged, specs), 1e-6)


def test_sample_quantiles_within_their_error() -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(size=200_000)
    sample = Sample(4096)
    for part in np.array_split(np.arange(len(values)), 9):  # batches, in any order
        sample.add(values[part], mix64(part.astype(np.uint64)))
    assert len(sample.values) == 4096
    qs = np.linspace(0.05, 0.95, 19)
    ranks = np.searchsorted(np.sort(values), sample.quantiles(qs)) / len(values)
    # rank error std is at most 0.5/sqrt(4096) = 0.0078: 4 sigma
    assert np.max(np.abs(ranks - qs)) < 4 * 0.5 / math.sqrt(4096)
    # the same sample whatever the order batches merge in
    other = Sample(4096)
    for part in reversed(np.array_split(np.arange(len(values)), 4)):
        other.add(values[part], mix64(part.astype(np.uint64)))
    assert sorted(other.values) == sorted(sample.values)


def test_hyperloglog_within_its_error() -> None:
    for n in (10, 1_000, 150_000):
        hll, other = HyperLogLog(), HyperLogLog()
        values = pa.array([f"v{i}" for i in range(n)])
        hll.add_values(values.slice(0, n // 2))
        other.add_values(values.slice(n // 2))
        other.add_values(values.slice(0, n // 3))  # repeats count once
        hll.merge(other)
        assert hll.exact == (n <= 4096)
        if hll.exact:
            assert hll.estimate() == n
        else:  # standard error 1.04/sqrt(4096) = 1.6%: 4 sigma
            assert abs(hll.estimate() - n) <= 4 * 0.0163 * n, n
    assert HyperLogLog().estimate() == 0
    assert len(hash_column(pa.array(["a"]))) == 1


def test_top_k_exact_then_bounded() -> None:
    rng = np.random.default_rng(2)
    heavy = [f"h{i}" for i in range(5)]
    tail = [f"t{i}" for i in range(3000)]
    values = np.array(heavy * 400 + tail + list(rng.choice(tail, 2000)))
    rng.shuffle(values)
    top = TopK(capacity=100)
    for part in np.array_split(values, 7):
        one = TopK(capacity=100)
        one.add_values(pa.array(part))
        top.merge(one)
    true = {v: int(c) for v, c in zip(*np.unique(values, return_counts=True), strict=True)}
    assert not top.exact
    reported = dict(top.top(5))
    assert set(reported) == set(heavy)
    bound = len(values) / 101
    for value, count in reported.items():
        assert true[value] - bound <= count <= true[value]
    small = TopK(capacity=100)
    small.add_values(pa.array(["a", "b", "a", None]))
    assert small.exact and small.top(5) == [("a", 2), ("b", 1)]


def test_statistics_file_parses(tmp_path) -> None:
    table = _extra_table(50)
    specs = plan_specs(table)
    stats = batch_statistics(table, specs, "in.parquet", np.arange(50))
    relative = write_statistics(str(tmp_path), "eval", stats, specs)
    assert relative == "statistics/eval/FeatureStats.pb"
    parsed = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (tmp_path / relative).read_bytes()
    )
    assert parsed.datasets[0].name == "eval" and parsed.datasets[0].num_examples == 50
    types = {f.path.step[0]: f.type for f in parsed.datasets[0].features}
    kinds = statistics_pb2.FeatureNameStatistics
    assert types == {
        "blob": kinds.BYTES,
        "id": kinds.INT,
        "ints": kinds.INT,
        "word": kinds.STRING,
        "x": kinds.FLOAT,
    }
    empty = to_proto("test", SplitStats(), specs)  # a split no row reached
    assert empty.datasets[0].num_examples == 0
    assert all(f.WhichOneof("stats") for f in empty.datasets[0].features)


def test_histogram_of_a_range_too_narrow_for_float_edges() -> None:
    """Values near 2**64 (uint64 columns) whose range has no 10 distinct float edges: numpy's
    histogram refuses them; every value is still counted once."""
    from transforms.stats.sketches import Sample

    same = np.full(5, 1.8446744073709552e19)
    assert Sample(10, same, np.arange(5.0)).histogram(same[0], same[0], 10, 5).tolist() == [
        5.0,
        *[0.0] * 9,
    ]
    near = np.array([9.2e18, 9.2e18 + 6144.0])
    counts = Sample(10, near, np.arange(2.0)).histogram(near[0], near[1], 10, 2)
    assert counts[0] == 1 and counts[-1] == 1 and counts.sum() == 2
