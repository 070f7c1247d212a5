"""Full-pass analyzers equal the exact statistics (quantiles within their documented bound),
however the data is split into batches and accumulators are merged."""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.preprocess.analyzers import (
    AnalyzeFn,
    Counts,
    Moments,
    Quantiles,
    Range,
    Vocabulary,
)
from transforms.preprocess.beam import AnalyzeCombineFn

OPTIONS = PipelineOptions(["--runner=FnApiRunner"])


def batches_of(values: np.ndarray, seed: int, null_rate: float = 0.1) -> list[pa.Array]:
    """Random-size batches with nulls (and the values under them set to junk)."""
    r = np.random.default_rng(seed)
    cuts = np.sort(r.choice(np.arange(1, len(values)), size=9, replace=False))
    out = []
    for part in np.split(values, cuts):
        mask = r.random(len(part)) < null_rate
        out.append(pa.array(part, mask=mask))
    return out


def fold(analyzer, arrays: list[pa.Array], seed: int = 0):
    """Accumulate in random groups, then merge the groups (as a runner may)."""
    r = np.random.default_rng(seed)
    groups = [analyzer.create_accumulator() for _ in range(3)]
    for arr in arrays:
        g = int(r.integers(0, 3))
        groups[g] = analyzer.add_input(groups[g], arr)
    return analyzer.extract_output(analyzer.merge_accumulators(groups))


def present(arrays: list[pa.Array]) -> np.ndarray:
    """Every non-null, non-NaN value (what analyzers look at)."""
    values = np.concatenate([a.drop_null().to_numpy(zero_copy_only=False) for a in arrays])
    return values[~np.isnan(values)] if values.dtype.kind == "f" else values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_moments_equal_numpy(seed):
    r = np.random.default_rng(seed)
    values = r.normal(1e4, 3.0, 20_000)  # a large mean: the naive sum-of-squares would drift
    values[r.random(values.size) < 0.02] = np.nan
    arrays = batches_of(values, seed)
    exact = present(arrays)
    result = fold(Moments(), arrays, seed)
    assert result["count"] == exact.size
    assert result["mean"] == pytest.approx(exact.mean(), rel=1e-13)
    assert result["std"] == pytest.approx(exact.std(), rel=1e-9)


def test_moments_and_range_of_nothing():
    assert fold(Moments(), [pa.array([None, None], pa.float64())]) == {
        "count": 0,
        "mean": None,
        "std": None,
    }
    assert fold(Range(), [pa.array([], pa.int64())]) == {"count": 0, "min": None, "max": None}


def test_range_is_exact_for_ints_and_floats():
    values = np.random.default_rng(4).integers(-(10**12), 10**12, 5000)
    arrays = batches_of(values, 4)
    exact = present(arrays)
    assert fold(Range(), arrays) == {
        "count": exact.size,
        "min": int(exact.min()),
        "max": int(exact.max()),
    }
    floats = [pa.array([np.nan, 2.5, None]), pa.array([-1.0, np.nan])]
    assert fold(Range(), floats) == {"count": 2, "min": -1.0, "max": 2.5}


def test_most_frequent_breaks_ties_by_the_smallest_value():
    arrays = [pa.array(["b", "a", None, "b"]), pa.array(["a", "c", None])]
    assert fold(Counts(), arrays) == {"count": 5, "value": "a", "frequency": 2}
    nums = [pa.array([3.0, np.nan, np.nan, np.nan, 1.0]), pa.array([1.0, 3.0])]
    assert fold(Counts(), nums)["value"] == 1.0


def test_vocabulary_order_top_k_and_min_frequency():
    r = np.random.default_rng(5)
    words = np.array(["é", "e", "E", "z", "aa", "a", "b\nc", "", "q"])
    values = words[r.integers(0, len(words), 4000)]
    arrays = batches_of(values, 5)
    flat = [v for a in arrays for v in a.to_pylist() if v is not None]
    counts = {w: flat.count(w) for w in set(flat)}
    ordered = sorted((w for w in counts if "\n" not in w), key=lambda w: (-counts[w], w.encode()))
    result = fold(Vocabulary(None, 1), arrays)
    assert result["values"] == ordered
    assert result["distinct"] == len(counts) and result["skipped_line_breaks"] == 1
    assert fold(Vocabulary(3, 1), arrays)["values"] == ordered[:3]
    cut = sorted(counts.values())[4]
    kept = [w for w in ordered if counts[w] >= cut]
    assert fold(Vocabulary(None, cut), arrays)["values"] == kept


def test_vocabulary_ties_are_bytes_ascending_and_ints_are_text():
    result = fold(Vocabulary(None, 1), [pa.array(["b", "a", "ab", "B"]), pa.array(["ab"])])
    assert result["values"] == ["ab", "B", "a", "b"]
    ints = fold(Vocabulary(None, 1), [pa.array([10, 9, 9, None, 10, 100])])
    assert ints["values"] == ["10", "9", "100"]


def exact_rank_interval(sorted_values: np.ndarray, v: float) -> tuple[int, int]:
    """1-based ranks a value occupies in the sorted data."""
    low = int(np.searchsorted(sorted_values, v, side="left")) + 1
    high = int(np.searchsorted(sorted_values, v, side="right"))
    return low, high


@pytest.mark.parametrize(("epsilon", "n"), [(0.01, 10), (0.005, 4), (0.05, 7)])
def test_quantiles_are_within_the_documented_rank_error(epsilon, n):
    r = np.random.default_rng(int(epsilon * 1000) + n)
    values = np.concatenate([r.lognormal(0, 1.5, 50_000), np.zeros(5000), np.full(3000, 7.0)])
    r.shuffle(values)
    arrays = [pa.array(part) for part in np.array_split(values, 40)]
    result = fold(Quantiles(n, epsilon), arrays)
    data = np.sort(values)
    total = data.size
    assert result["count"] == total and len(result["quantiles"]) == n - 1
    for i, q in enumerate(result["quantiles"], start=1):
        target = math.ceil(i * total / n)  # numpy's "inverted_cdf"
        low, high = exact_rank_interval(data, q)
        distance = 0 if low <= target <= high else min(abs(target - low), abs(target - high))
        assert distance <= epsilon * total, (i, q, target, low, high)
    assert result["boundaries"] == sorted(set(result["quantiles"]))


def test_quantiles_of_a_small_column_are_exact():
    values = np.random.default_rng(8).normal(size=3001)
    arrays = batches_of(values, 8, null_rate=0.0)
    result = fold(Quantiles(10), arrays)
    expected = np.quantile(values, np.arange(1, 10) / 10, method="inverted_cdf")
    assert result["quantiles"] == pytest.approx(expected.tolist(), abs=0)
    median = fold(Quantiles(2), [pa.array([5, 1, None, 3, 2])])
    assert median["quantiles"] == [2]  # the lower median of 1, 2, 3, 5


def test_analyze_fn_in_a_beam_pipeline():
    r = np.random.default_rng(9)
    x = r.normal(5, 2, 3000)
    words = np.array(["a", "b", "c"])[r.integers(0, 3, 3000)]
    inputs = [
        {0: pa.array(x[i : i + 500]), 1: pa.array(words[i : i + 500])} for i in range(0, 3000, 500)
    ]
    analyzers = {0: Moments(), 1: Vocabulary(2, 1), 2: Quantiles(4)}
    for element in inputs:
        element[2] = element[0]
    direct = AnalyzeFn(analyzers)
    acc = direct.create_accumulator()
    for element in inputs:
        acc = direct.add_input(acc, element)
    expected = direct.extract_output(acc)
    with beam.Pipeline(options=OPTIONS) as p:
        out = (
            p
            | beam.Create(inputs, reshuffle=True)
            | beam.CombineGlobally(AnalyzeCombineFn(analyzers))
        )
        vocab = out | "Vocab" >> beam.Map(lambda r: (r[1]["values"], r[0]["count"], r[2]["count"]))
        assert_that(vocab, equal_to([(expected[1]["values"], 3000, 3000)]))
        means = out | "Mean" >> beam.Map(lambda r: round(r[0]["mean"], 9))
        assert_that(means, equal_to([round(float(x.mean()), 9)]), label="mean")
