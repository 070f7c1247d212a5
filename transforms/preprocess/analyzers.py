"""Full-pass statistics: mergeable accumulators as plain objects, and `AnalyzeFn`, several of
them folded in one pass (a Beam CombineFn wraps it in transforms/preprocess/beam.py).

Each analyzer follows the CombineFn protocol (create / add / merge / extract) over columns
(pa.Array) rather than rows, so a batch is folded in with a few vectorized calls. Nulls are
skipped, and so is NaN in a float column. Memory does not grow with the number of rows:
moments and ranges are O(1), the quantile sketch holds at most a few hundred thousand values,
counts hold one entry per distinct value (bounded by the column's cardinality).

Results are plain JSON-able dicts (the statistics file holds them as they are), except the
vocabulary's "values" list, which goes to its own file.

Quantiles use Beam's ApproximateQuantilesCombineFn (Manku, Rajagopalan & Lindsay's mergeable
sketch), copied without Beam (transforms/preprocess/quantile_sketch.py: importing Beam took longer
than the rest of a local job's start-up), with the same results. For N
values (N < 1e9) the value returned for the i-th of n quantiles has a rank within epsilon * N of
the exact one, the value of rank ceil(i * N / n) (numpy's quantile(..., method="inverted_cdf")).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.preprocess.quantile_sketch import QuantileSketch

__all__ = [
    "DEFAULT_EPSILON",
    "AnalyzeFn",
    "Counts",
    "Moments",
    "Quantiles",
    "Range",
    "Vocabulary",
    "finite_values",
]

DEFAULT_EPSILON = 0.001
LINE_BREAKS = (b"\n", b"\r")


def finite_values(arr: pa.Array) -> np.ndarray:
    """The non-null values of a numeric column as numpy (float NaN dropped)."""
    values = pc.drop_null(arr).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        values = values[~np.isnan(values)]
    return values


@dataclasses.dataclass(frozen=True)
class _MomentsAcc:
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean


class Moments:
    """count, mean and population standard deviation (Chan et al.'s parallel update)."""

    def create_accumulator(self) -> _MomentsAcc:
        return _MomentsAcc()

    def add_input(self, acc: _MomentsAcc, arr: pa.Array) -> _MomentsAcc:
        x = finite_values(arr).astype(np.float64, copy=False)
        if x.size == 0:
            return acc
        mean = float(x.mean())
        return self._merge(acc, _MomentsAcc(int(x.size), mean, float(((x - mean) ** 2).sum())))

    @staticmethod
    def _merge(a: _MomentsAcc, b: _MomentsAcc) -> _MomentsAcc:
        if a.count == 0:
            return b
        if b.count == 0:
            return a
        n = a.count + b.count
        delta = b.mean - a.mean
        mean = a.mean + delta * b.count / n
        m2 = a.m2 + b.m2 + delta * delta * a.count * b.count / n
        return _MomentsAcc(n, mean, m2)

    def merge_accumulators(self, accs: Iterable[_MomentsAcc]) -> _MomentsAcc:
        out = _MomentsAcc()
        for acc in accs:
            out = self._merge(out, acc)
        return out

    def extract_output(self, acc: _MomentsAcc) -> dict[str, Any]:
        if acc.count == 0:
            return {"count": 0, "mean": None, "std": None}
        return {"count": acc.count, "mean": acc.mean, "std": math.sqrt(acc.m2 / acc.count)}


class Range:
    """count, min and max."""

    def create_accumulator(self) -> tuple[int, Any, Any]:
        return (0, None, None)

    def add_input(self, acc: tuple[int, Any, Any], arr: pa.Array) -> tuple[int, Any, Any]:
        x = finite_values(arr)
        if x.size == 0:
            return acc
        return self.merge_accumulators([acc, (int(x.size), x.min().item(), x.max().item())])

    def merge_accumulators(self, accs: Iterable[tuple[int, Any, Any]]) -> tuple[int, Any, Any]:
        count, low, high = 0, None, None
        for n, a, b in accs:
            if n:
                count += n
                low = a if low is None else min(low, a)
                high = b if high is None else max(high, b)
        return (count, low, high)

    def extract_output(self, acc: tuple[int, Any, Any]) -> dict[str, Any]:
        return {"count": acc[0], "min": acc[1], "max": acc[2]}


def _counts(arr: pa.Array, as_text: bool) -> collections.Counter:
    if as_text and pa.types.is_integer(arr.type):
        arr = pc.cast(arr, pa.string())
    arr = pc.drop_null(arr)
    if pa.types.is_floating(arr.type):
        arr = arr.filter(pc.invert(pc.is_nan(arr)))
    counted = pc.value_counts(arr)
    values = counted.field("values").to_pylist()
    return collections.Counter(dict(zip(values, counted.field("counts").to_pylist(), strict=True)))


def _order_key(value: Any) -> Any:
    """Ties are broken by the value: bytes ascending for text (UTF-8), numbers ascending."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


class Counts:
    """The most frequent value (ties: the smallest value), for fill_missing: most_frequent."""

    def create_accumulator(self) -> collections.Counter:
        return collections.Counter()

    def add_input(self, acc: collections.Counter, arr: pa.Array) -> collections.Counter:
        acc.update(_counts(arr, as_text=False))
        return acc

    def merge_accumulators(self, accs: Iterable[collections.Counter]) -> collections.Counter:
        out: collections.Counter = collections.Counter()
        for acc in accs:
            out.update(acc)
        return out

    def extract_output(self, acc: collections.Counter) -> dict[str, Any]:
        if not acc:
            return {"count": 0, "value": None, "frequency": 0}
        value, frequency = min(acc.items(), key=lambda kv: (-kv[1], _order_key(kv[0])))
        return {"count": sum(acc.values()), "value": value, "frequency": frequency}


class Vocabulary(Counts):
    """Values ordered by frequency (descending), ties by the value's bytes (ascending).

    Integers are counted by their decimal text. A value holding a line break cannot be one line
    of the vocabulary file: it is left out (it maps to the out-of-vocabulary ids) and counted.
    """

    def __init__(self, top_k: int | None, min_frequency: int) -> None:
        self.top_k = top_k
        self.min_frequency = min_frequency

    def add_input(self, acc: collections.Counter, arr: pa.Array) -> collections.Counter:
        acc.update(_counts(arr, as_text=True))
        return acc

    def extract_output(self, acc: collections.Counter) -> dict[str, Any]:
        def raw(v: Any) -> bytes:
            return v.encode("utf-8") if isinstance(v, str) else v

        kept = [
            (v, c)
            for v, c in acc.items()
            if c >= self.min_frequency and not any(b in raw(v) for b in LINE_BREAKS)
        ]
        skipped = sum(1 for v in acc if any(b in raw(v) for b in LINE_BREAKS))
        kept.sort(key=lambda vc: (-vc[1], raw(vc[0])))
        if self.top_k is not None:
            kept = kept[: self.top_k]
        return {
            "count": sum(acc.values()),
            "distinct": len(acc),
            "size": len(kept),
            "skipped_line_breaks": skipped,
            "values": [v for v, _ in kept],
            "frequencies": [c for _, c in kept],
        }


class Quantiles:
    """n-quantile boundaries (n - 1 values), or the median for n = 2, from a mergeable sketch."""

    def __init__(self, num_buckets: int, epsilon: float = DEFAULT_EPSILON) -> None:
        self.num_buckets = num_buckets
        self.epsilon = epsilon
        self._sketch: Any = None

    def __reduce__(self) -> tuple:
        return (Quantiles, (self.num_buckets, self.epsilon))

    @property
    def _fn(self) -> QuantileSketch:
        """The quantile sketch (Beam's algorithm, transforms/preprocess/quantile_sketch.py),
        made on first use."""
        if self._sketch is None:
            self._sketch = QuantileSketch.create(
                num_quantiles=self.num_buckets + 1, epsilon=self.epsilon
            )
        return self._sketch

    def create_accumulator(self) -> list:
        return [0, self._fn.create_accumulator()]

    def add_input(self, acc: list, arr: pa.Array) -> list:
        x = finite_values(arr)
        if x.size:
            acc[0] += int(x.size)
            acc[1] = self._fn.add_input(acc[1], x)
        return acc

    def merge_accumulators(self, accs: Iterable[list]) -> list:
        accs = list(accs)
        return [sum(a[0] for a in accs), self._fn.merge_accumulators([a[1] for a in accs])]

    def extract_output(self, acc: list) -> dict[str, Any]:
        quantiles = self._fn.extract_output(acc[1]) if acc[0] else []
        inner = quantiles[1:-1]
        return {
            "count": acc[0],
            "epsilon": self.epsilon,
            "quantiles": inner,
            "boundaries": sorted(set(inner)),
        }


class AnalyzeFn:
    """Several analyzers in one pass: input {step: column}, output {step: result}; the
    CombineFn protocol (create / add / merge / extract) without Beam."""

    def __init__(self, analyzers: Mapping[int, Any]) -> None:
        self._analyzers = dict(analyzers)

    def create_accumulator(self) -> dict[int, Any]:
        return {i: a.create_accumulator() for i, a in self._analyzers.items()}

    def add_input(self, acc: dict[int, Any], columns: Mapping[int, pa.Array]) -> dict[int, Any]:
        for i, arr in columns.items():
            acc[i] = self._analyzers[i].add_input(acc[i], arr)
        return acc

    def merge_accumulators(self, accs: Iterable[dict[int, Any]]) -> dict[int, Any]:
        accs = list(accs)
        return {
            i: a.merge_accumulators([acc[i] for acc in accs]) for i, a in self._analyzers.items()
        }

    def extract_output(self, acc: dict[int, Any]) -> dict[int, dict[str, Any]]:
        return {i: a.extract_output(acc[i]) for i, a in self._analyzers.items()}
