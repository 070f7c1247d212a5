"""Mergeable sketches for the statistics, each updated a whole batch at a time (numpy, pyarrow).

- `Sample`: a bottom-k sample: the `k` values with the smallest priorities, where a value's
  priority is a hash of where it is (source file, row, position in the row). A uniform sample
  without replacement, the same whatever the order batches arrive and merge in. Quantiles and
  histograms are read from it: a quantile's rank error has standard deviation
  sqrt(q(1-q)/k), at most 0.5/sqrt(k) (0.78% of the rows for k = 4096); exact below k values.
- `HyperLogLog`: distinct values: exact (the distinct 64-bit hashes kept) up to 4096 values,
  past that 2**p one-byte registers (p = 12: standard error 1.04/sqrt(4096) = 1.6%).
- `TopK`: a Misra-Gries summary of at most `capacity` counters, merged as in Agarwal et al.,
  "Mergeable summaries" (2012): exact while a split has at most `capacity` distinct values;
  past that each count is low by at most n/(capacity+1), n the values counted.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from transforms.hashing import hash_bytes, hash_column

__all__ = [
    "GOLDEN",
    "HyperLogLog",
    "Sample",
    "TopK",
    "fixed_priorities",
    "keyed_mix",
    "mix64",
    "position_priorities",
    "row_keys",
    "smallest",
]

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio: a Weyl step
_S33 = np.uint64(33)


def mix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer over a uint64 array (wrapping arithmetic)."""
    h = np.asarray(h, np.uint64)
    h = h ^ (h >> _S33)
    h = h * _M1
    h = h ^ (h >> _S33)
    h = h * _M2
    return h ^ (h >> _S33)


@njit(cache=True)
def _fmix(h: np.uint64) -> np.uint64:  # pragma: no cover
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    return h ^ (h >> _S33)


@njit(cache=True)
def _keyed_mix(rows: np.ndarray, base: np.uint64) -> np.ndarray:  # pragma: no cover
    out = np.empty(len(rows), np.uint64)
    for i in range(len(rows)):
        out[i] = _fmix(_fmix(np.uint64(rows[i])) ^ base)
    return out


def keyed_mix(rows: np.ndarray, base: int) -> np.ndarray:
    """`mix64(mix64(rows) ^ base)` in one compiled pass (rows: int64, as uint64 bits)."""
    return _keyed_mix(np.ascontiguousarray(rows, np.int64), np.uint64(base))


def row_keys(source: str, rows: np.ndarray) -> np.ndarray:
    """A uint64 key per row from its source file and row number: the sample's priorities."""
    return keyed_mix(np.asarray(rows, np.int64), hash_bytes(source.encode("utf-8")))


def position_priorities(row_keys: np.ndarray, element_rows: np.ndarray) -> np.ndarray:
    """A priority per element of a flattened list column: its row's key (`row_keys`, already
    mixed) plus its position in the row times the golden-ratio constant (a Weyl step: each
    element's priority is uniform when its row's key is). `element_rows` is sorted."""
    n = len(element_rows)
    if n == 0:
        return np.empty(0, np.uint64)
    starts = np.flatnonzero(np.r_[True, element_rows[1:] != element_rows[:-1]])
    run = np.repeat(starts, np.diff(np.r_[starts, n]))
    position = (np.arange(n, dtype=np.int64) - run).astype(np.uint64)
    return row_keys[element_rows] + position * GOLDEN


@njit(cache=True)
def _fixed_below(keys: np.ndarray, fixed: int, bound: np.uint64) -> tuple:  # pragma: no cover
    golden = np.uint64(0x9E3779B97F4A7C15)
    count = 0
    for r in range(len(keys)):
        p = keys[r]
        for _ in range(fixed):
            count += p < bound
            p += golden
    priorities = np.empty(count, np.uint64)
    index = np.empty(count, np.int64)
    count = 0
    for r in range(len(keys)):
        p = keys[r]
        for j in range(fixed):
            if p < bound:
                priorities[count] = p
                index[count] = r * fixed + j
                count += 1
            p += golden
    return priorities, index


def fixed_priorities(
    row_keys: np.ndarray, fixed: int, bound: int | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The priorities of the values of rows that each hold `fixed` values in row order (the
    value at position j of a row: its key plus j times the golden-ratio constant), and their
    indices: only those under `bound` (when it is None: all of them, and None for indices)."""
    if bound is None:
        steps = np.arange(fixed, dtype=np.uint64) * GOLDEN
        return (row_keys[:, None] + steps[None, :]).ravel(), None
    return _fixed_below(np.ascontiguousarray(row_keys, np.uint64), fixed, np.uint64(bound))


def smallest(priorities: np.ndarray, k: int) -> np.ndarray:
    """The indices of the `k` smallest priorities (uniform uint64s): first those under a bound
    that about 2k of them pass, then a partial sort of those."""
    n = len(priorities)
    if n <= k:
        return np.arange(n)
    if 2 * k < n:
        bound = np.uint64((2 * k * (2**64 // n)) & (2**64 - 1))
        candidates = np.flatnonzero(priorities < bound)
        if len(candidates) >= k:
            return candidates[np.argpartition(priorities[candidates], k - 1)[:k]]
    return np.argpartition(priorities, k - 1)[:k]


class Sample:
    """A bottom-k sample of numbers (see the module docstring).

    Values offered are first checked against the bound (the largest priority kept, once k
    are) and put aside; once k are aside, they and the kept ones are cut to the k smallest.
    `values` and `priorities` (in no particular order) cut first: reading them is exact."""

    def __init__(
        self, k: int, values: np.ndarray | None = None, priorities: np.ndarray | None = None
    ) -> None:
        self.k = k
        self._values = np.empty(0, np.float64) if values is None else values
        self._priorities = np.empty(0, np.uint64) if priorities is None else priorities
        self._aside: list[tuple[np.ndarray, np.ndarray]] = []
        self._aside_count = 0
        self._bound: int | None = None
        if len(self._priorities) > k:
            raise ValueError(f"{len(self._priorities)} values given to a sample of {k}")
        if len(self._priorities) == k:  # full (a sample read back): its bound, as it was
            self._bound = int(self._priorities.max())

    @property
    def values(self) -> np.ndarray:
        self._cut()
        return self._values

    @property
    def priorities(self) -> np.ndarray:
        self._cut()
        return self._priorities

    def add(self, values: np.ndarray, priorities: np.ndarray) -> None:
        """Add values (any numbers) with their priorities (uint64)."""
        values = np.asarray(values, np.float64)
        priorities = np.asarray(priorities, np.uint64)
        if self._bound is not None:  # full: only priorities under its largest can enter
            keep = priorities < np.uint64(self._bound)
            values, priorities = values[keep], priorities[keep]
        if len(values) == 0:
            return
        self._aside.append((values, priorities))
        self._aside_count += len(values)
        if self._aside_count >= self.k:
            self._cut()

    def _cut(self) -> None:
        """Keep the k smallest priorities of the kept values and those put aside."""
        if not self._aside:
            return
        values = np.concatenate([self._values, *(v for v, _ in self._aside)])
        priorities = np.concatenate([self._priorities, *(p for _, p in self._aside)])
        self._aside, self._aside_count = [], 0
        if len(values) > self.k:
            keep = smallest(priorities, self.k)
            values, priorities = values[keep], priorities[keep]
        self._values, self._priorities = values, priorities
        if len(priorities) >= self.k:
            self._bound = int(priorities.max())

    def merge(self, other: Sample) -> None:
        self.add(other.values, other.priorities)

    def bound(self) -> int | None:
        """A priority a value must be under to enter (the largest kept when last cut, once
        k are kept); None while fewer are: any value enters."""
        return self._bound

    def quantiles(self, qs: np.ndarray) -> np.ndarray:
        """The sample's quantiles at `qs` (in [0, 1]); empty when the sample is."""
        if len(self.values) == 0:
            return np.empty(0, np.float64)
        return np.quantile(self.values, qs, method="inverted_cdf")

    def histogram(self, low: float, high: float, buckets: int, total: int) -> np.ndarray:
        """Counts in `buckets` equal-width buckets over [low, high], scaled from the sample to
        `total` values (the last bucket closed)."""
        if len(self.values) == 0:
            return np.zeros(buckets, np.float64)
        try:
            counts, _ = np.histogram(self.values, bins=buckets, range=(low, high))
        except ValueError:  # a range too narrow for its magnitude: no distinct float edges
            counts = np.zeros(buckets, np.float64)
            width = high - low
            if width > 0 and np.isfinite(width):
                at = np.floor((np.asarray(self.values, np.float64) - low) / width * buckets)
                np.add.at(counts, np.clip(at, 0, buckets - 1).astype(np.int64), 1)
            else:
                counts[0] = len(self.values)
        return counts * (total / len(self.values))


def _lowest_bit_rank(rest: np.ndarray, width: int) -> np.ndarray:
    """1 + the number of trailing zero bits of each value (width + 1 for zero)."""
    low = rest & (~rest + np.uint64(1))  # the lowest set bit: an exact power of two
    rank = np.full(len(rest), width + 1, np.uint8)
    nonzero = low != 0
    rank[nonzero] = np.log2(low[nonzero].astype(np.float64)).astype(np.uint8) + 1
    return rank


@dataclasses.dataclass
class HyperLogLog:
    """Distinct-count registers (see the module docstring); exact (the distinct hashes kept)
    while there are at most `exact_limit` distinct values."""

    p: int = 12
    exact_limit: int = 4096
    hashes: np.ndarray | None = dataclasses.field(
        default_factory=lambda: np.empty(0, np.uint64)
    )  # the distinct hashes, while exact; None once the registers count
    registers: np.ndarray | None = None

    def add_hashes(self, hashes: np.ndarray) -> None:
        """Count uint64 hashes of values (a value's hash: transforms/hashing.py)."""
        if len(hashes) == 0:
            return
        self._add_mixed(mix64(hashes))  # FNV's high bits alone are not spread enough

    def add_values(self, values: pa.Array) -> None:
        """Count the values of a string or binary array (nulls skipped)."""
        self.add_hashes(hash_column(values.drop_null()))

    def merge(self, other: HyperLogLog) -> None:
        if other.hashes is not None:
            self._add_mixed(other.hashes)
            return
        if self.hashes is not None:
            mine, self.hashes = self.hashes, None
            self.registers = other.registers.copy()
            self._add_mixed(mine)
            return
        np.maximum(self.registers, other.registers, out=self.registers)

    def _add_mixed(self, mixed: np.ndarray) -> None:
        """Add hashes that are already mixed (kept by an exact sketch)."""
        if self.hashes is not None:
            if len(self.hashes):  # only hashes not yet kept (found by a binary search)
                at = np.minimum(np.searchsorted(self.hashes, mixed), len(self.hashes) - 1)
                mixed = mixed[self.hashes[at] != mixed]
                if len(mixed) == 0:
                    return
            self.hashes = np.union1d(self.hashes, mixed)
            if len(self.hashes) <= self.exact_limit:
                return
            mixed, self.hashes = self.hashes, None
            self.registers = np.zeros(1 << self.p, np.uint8)
        index = (mixed >> np.uint64(64 - self.p)).astype(np.int64)
        rest = mixed & np.uint64((1 << (64 - self.p)) - 1)
        np.maximum.at(self.registers, index, _lowest_bit_rank(rest, 64 - self.p))

    @property
    def exact(self) -> bool:
        return self.hashes is not None

    def estimate(self) -> int:
        if self.hashes is not None:
            return len(self.hashes)
        m = float(1 << self.p)
        alpha = 0.7213 / (1 + 1.079 / m)
        estimate = alpha * m * m / float(np.sum(np.ldexp(1.0, -self.registers.astype(np.int64))))
        zeros = int(np.count_nonzero(self.registers == 0))
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return round(estimate)


@dataclasses.dataclass
class TopK:
    """A Misra-Gries summary of string or binary values (see the module docstring)."""

    capacity: int = 1000
    values: pa.Array | None = None
    counts: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, np.int64))
    exact: bool = True  # no counter was ever cut
    hashes: np.ndarray = dataclasses.field(  # hash_column(values), increasing: how values
        default_factory=lambda: np.empty(0, np.uint64)  # are told apart
    )

    def add_values(self, values: pa.Array) -> None:
        """Count the values of an array (nulls skipped)."""
        self.add_counted(pc.value_counts(values.drop_null()))

    def add_counted(self, counted: pa.StructArray, hashes: np.ndarray | None = None) -> None:
        """Add what `pc.value_counts` gave (a null value is skipped); `hashes`, when known:
        `hash_column` of its values (nulls left out)."""
        values, counts = counted.field("values"), counted.field("counts")
        if values.null_count:
            keep = values.is_valid()
            values, counts = values.filter(keep), counts.filter(keep)
        if hashes is None:
            hashes = hash_column(values)
        self.add(values, counts.to_numpy().astype(np.int64), hashes)

    def merge(self, other: TopK) -> None:
        if other.values is not None:
            self.add(other.values, other.counts, other.hashes)
        self.exact = self.exact and other.exact

    def add(self, values: pa.Array, counts: np.ndarray, hashes: np.ndarray) -> None:
        """Add distinct values with their counts and `hash_column` hashes. The counters are
        kept in order of hash: a value already counted is found by a binary search, and only
        new values are appended."""
        counts = np.asarray(counts, np.int64)
        if self.values is not None and len(self.values):
            at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
            found = self.hashes[at] == hashes  # the same value: summed
            mine = self.counts.copy()
            mine[at[found]] += counts[found]
            if found.all():
                values, counts, hashes = self.values, mine, self.hashes
            else:
                new = ~found
                values = pa.concat_arrays(
                    [self.values.cast(values.type), values.filter(pa.array(new))]
                )
                counts = np.concatenate([mine, counts[new]])
                hashes = np.concatenate([self.hashes, hashes[new]])
        if len(hashes) and not (hashes[1:] > hashes[:-1]).all():
            order = np.argsort(hashes)
            values, counts, hashes = values.take(pa.array(order)), counts[order], hashes[order]
        if len(counts) > self.capacity:
            order = np.argsort(-counts, kind="stable")
            cut = counts[order[self.capacity]]  # the (capacity+1)-th largest count
            keep = order[: self.capacity]
            keep = np.sort(keep[counts[keep] > cut])
            values, counts = values.take(pa.array(keep)), counts[keep] - cut
            hashes = hashes[keep]
            self.exact = False
        self.values, self.counts, self.hashes = values, counts, hashes

    def top(self, n: int) -> list[tuple[object, int]]:
        """The `n` most frequent (value, count), most frequent first, ties by value."""
        if self.values is None or len(self.counts) == 0:
            return []
        items = list(zip(self.values.to_pylist(), self.counts.tolist(), strict=True))
        items.sort(key=lambda item: (-item[1], item[0]))
        return items[:n]
