"""The oracle of the statistics tests: what each feature's statistics must be, computed in plain
Python and numpy from the records themselves (parsed by TensorFlow), and the check of a
`FeatureNameStatistics` against it."""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.encode.schema import FeatureSpec
from transforms.stats.features import SAMPLE_SIZE, stats_kind

__all__ = ["check_statistics", "expected_statistics"]


def _numbers(spec: FeatureSpec, values: list[Any]) -> list[float]:
    if spec.encoding == "float64_bytes":
        return [float(x) for v in values for x in np.frombuffer(v, "<f8")]
    if spec.dtype == "uint64":  # the records hold a uint64's bits as int64
        return [float(v % 2**64) for v in values]
    return [float(v) for v in values]


def expected_statistics(
    records: Sequence[Mapping[str, list[Any] | None]], specs: Sequence[FeatureSpec]
) -> dict[str, dict[str, Any]]:
    """Feature name -> the statistics the records give (present, missing, value counts; for
    numbers: count, NaNs, zeros, min, max, mean, std, median; for strings: distinct values,
    the count of every value, mean length)."""
    out = {}
    for spec in specs:
        rows = [r[spec.name] or [] for r in records if spec.name in r]
        if spec.encoding == "float64_bytes":  # counted as the float64 numbers they hold
            counts = [sum(len(b) // 8 for b in v) for v in rows]
        else:
            counts = [len(v) for v in rows]
        flat = [x for v in rows for x in v]
        entry: dict[str, Any] = {
            "kind": stats_kind(spec),
            "present": len(rows),
            "missing": len(records) - len(rows),
            "values": sum(counts),
            "min_values": min(counts, default=0),
            "max_values": max(counts, default=0),
        }
        if entry["kind"] == "numeric":
            numbers = np.array(_numbers(spec, flat), np.float64)
            nan = np.isnan(numbers)
            finite = numbers[~nan]
            entry.update(nans=int(nan.sum()), count=len(finite), zeros=int((finite == 0).sum()))
            if len(finite):
                entry.update(
                    min=float(finite.min()),
                    max=float(finite.max()),
                    mean=float(np.mean(finite)),
                    std=float(np.std(finite)) if np.isfinite(finite).all() else math.nan,
                    median=float(np.quantile(finite, 0.5, method="inverted_cdf")),
                )
        else:
            entry["frequencies"] = collections.Counter(flat)
            entry["avg_length"] = sum(len(v) for v in flat) / len(flat) if flat else 0.0
            entry["lengths"] = [len(v) for v in flat]
        out[spec.name] = entry
    return out


def _close(actual: float, expected: float, rel: float = 1e-9) -> bool:
    if math.isnan(expected):
        return math.isnan(actual)
    if math.isinf(expected):
        return actual == expected
    return math.isclose(actual, expected, rel_tol=rel, abs_tol=1e-9 * max(1.0, abs(expected)))


def check_statistics(dataset: Any, expected: Mapping[str, Mapping[str, Any]]) -> None:
    """Assert that a `DatasetFeatureStatistics` holds the expected statistics, feature by
    feature (the message names the feature and the statistic)."""
    by_name = {f.path.step[0]: f for f in dataset.features}
    assert set(by_name) == set(expected)
    for name, want in expected.items():
        feature = by_name[name]
        kind = feature.WhichOneof("stats")
        stats = getattr(feature, kind)
        common = stats.common_stats
        got = (common.num_non_missing, common.num_missing, common.tot_num_values)
        assert got == (want["present"], want["missing"], want["values"]), name
        if want["present"]:
            assert common.min_num_values == want["min_values"], name
            assert common.max_num_values == want["max_values"], name
            assert _close(common.avg_num_values, want["values"] / want["present"], 1e-6), name
        if want["kind"] == "numeric":
            assert kind == "num_stats", name
            assert stats.num_zeros == want["zeros"], name
            assert stats.histograms[0].num_nan == want["nans"], name
            if want["count"]:
                assert stats.min == want["min"] and stats.max == want["max"], name
                assert _close(stats.mean, want["mean"]), (name, stats.mean, want["mean"])
                assert _close(stats.std_dev, want["std"], 1e-6), (name, stats.std_dev)
                if want["count"] <= SAMPLE_SIZE:  # the sample holds every value: exact
                    assert stats.median == want["median"], name
                standard = stats.histograms[0]
                total = sum(b.sample_count for b in standard.buckets)
                if math.isfinite(want["max"] - want["min"]):
                    assert math.isclose(total, want["count"]), name
        else:
            assert kind == ("string_stats" if want["kind"] == "string" else "bytes_stats"), name
            distinct = len(want["frequencies"])
            if distinct <= 4096:  # exact up to 4096 values, else 1.6% standard error
                assert stats.unique == distinct, (name, stats.unique, distinct)
            else:
                assert abs(stats.unique - distinct) <= 4 * 0.0163 * distinct, name
            if want["kind"] == "string":
                assert _close(stats.avg_length, want["avg_length"], 1e-6), name  # a float32
                counts = sorted(want["frequencies"].values(), reverse=True)
                got_counts = [v.frequency for v in stats.top_values]
                assert got_counts == counts[: len(got_counts)], name
                assert len(got_counts) == min(20, distinct), name
                for top in stats.top_values:
                    value = top.value.encode("utf-8")
                    assert want["frequencies"][value] == top.frequency, (name, value)
            elif want["lengths"]:
                assert stats.min_num_bytes == min(want["lengths"]), name
                assert stats.max_num_bytes == max(want["lengths"]), name


def assert_same_statistics(a: Any, b: Any, rel_tol: float) -> None:
    """Two `DatasetFeatureStatisticsList`s of the same rows merged in another order: equal in
    every field but each numeric feature's mean and std_dev, which are summed in another order
    and so equal to `rel_tol` (or both NaN). Neither message is changed."""
    a, b = type(a).FromString(a.SerializeToString()), type(b).FromString(b.SerializeToString())
    assert a.datasets[0].num_examples == b.datasets[0].num_examples
    for fa, fb in zip(a.datasets[0].features, b.datasets[0].features, strict=True):
        if fa.WhichOneof("stats") == "num_stats":
            for field in ("mean", "std_dev"):
                x, y = getattr(fa.num_stats, field), getattr(fb.num_stats, field)
                assert (math.isnan(x) and math.isnan(y)) or math.isclose(
                    x, y, rel_tol=rel_tol, abs_tol=1e-12
                ), (fa.path.step[0], field, x, y)
                fa.num_stats.ClearField(field)
                fb.num_stats.ClearField(field)
        assert fa == fb, fa.path.step[0]
