"""`FeatureStats`: one feature's statistics accumulator (counts, moments, extremes, and the
sketches of sketches.py), and how two merge. What it is filled from is features.py; what it is
written as is proto.py; how it is saved and read back is sketches_file.py.

An infinity is counted apart (`infinities`) and left out of the mean and the squared
deviations, which are merged with Chan et al.'s pairwise update; NaNs are counted apart and
left out of everything else.
"""

from __future__ import annotations

import dataclasses
import math

from transforms.encode.schema import BYTES, FeatureSpec
from transforms.stats.sketches import HyperLogLog, Sample, TopK

__all__ = ["SAMPLE_SIZE", "TOP_CAPACITY", "FeatureStats", "stats_kind"]

SAMPLE_SIZE = 4096  # values kept for quantiles and histograms, per feature and split
TOP_CAPACITY = 1000  # counters of the top-k summary, per string feature and split


def stats_kind(spec: FeatureSpec) -> str:
    """ "numeric", "string" or "bytes": which statistics a feature gets. Binary sources get
    "bytes" (their values need not be UTF-8); other bytes features (strings, decimals) "string"."""
    if spec.kind != BYTES or spec.encoding == "float64_bytes":
        return "numeric"
    return "bytes" if "binary" in spec.source_type else "string"


@dataclasses.dataclass
class FeatureStats:
    """One feature's accumulator: presence and value counts for all; moments, extremes and a
    sample for numbers; lengths, distinct values and the top values for strings and bytes."""

    kind: str
    present: int = 0
    missing: int = 0
    values: int = 0  # total values over the present rows
    min_values: int | None = None  # values in a present row: least, most
    max_values: int | None = None
    value_counts: Sample | None = None  # values per present row (list features)
    count: int = 0  # numbers that are not NaN
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean
    min: float = math.inf
    max: float = -math.inf
    zeros: int = 0
    nans: int = 0
    infinities: tuple[int, int] = (0, 0)  # -inf, +inf values: left out of mean and m2
    sample: Sample | None = None
    length_sum: int = 0  # bytes of the string values
    min_length: int | None = None
    max_length: int | None = None
    distinct: HyperLogLog | None = None
    top: TopK | None = None

    @property
    def finite_count(self) -> int:
        """The numbers `mean` and `m2` are over."""
        return self.count - sum(self.infinities)

    def moments(self) -> tuple[float, float]:
        """(mean, population standard deviation) of the numbers, as numpy gives them: an
        infinity makes the mean infinite (NaN for both signs) and the deviation NaN."""
        negative, positive = self.infinities
        if negative or positive:
            mean = math.nan if negative and positive else math.inf if positive else -math.inf
            return mean, math.nan
        return self.mean, math.sqrt(max(self.m2, 0.0) / self.count) if self.count else 0.0

    def merge(self, other: FeatureStats) -> None:
        self.present += other.present
        self.missing += other.missing
        self.values += other.values
        self.min_values = _least(self.min_values, other.min_values, min)
        self.max_values = _least(self.max_values, other.max_values, max)
        self.min_length = _least(self.min_length, other.min_length, min)
        self.max_length = _least(self.max_length, other.max_length, max)
        for name in ("value_counts", "sample", "distinct", "top"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                if mine is None:
                    setattr(self, name, theirs)
                else:
                    mine.merge(theirs)
        self.add_moments(
            other.nans,
            other.zeros,
            other.count,
            other.min,
            other.max,
            *other.infinities,
            other.mean,
            other.m2,
        )
        self.length_sum += other.length_sum

    def add_moments(
        self,
        nans: int,
        zeros: int,
        count: int,
        low: float,
        high: float,
        negative: int,
        positive: int,
        mean: float,
        m2: float,
    ) -> None:
        """Add the numbers' statistics of other rows (what `moments` gives)."""
        mine, theirs = self.finite_count, count - negative - positive
        if theirs:
            delta = mean - self.mean
            self.mean += delta * theirs / (mine + theirs)
            self.m2 += m2 + delta * delta * mine * theirs / (mine + theirs)
        self.count += count
        self.min, self.max = min(self.min, low), max(self.max, high)
        self.zeros += zeros
        self.nans += nans
        if negative or positive:
            self.infinities = (self.infinities[0] + negative, self.infinities[1] + positive)


def _least(a: int | None, b: int | None, pick) -> int | None:  # noqa: ANN001
    return b if a is None else a if b is None else pick(a, b)
