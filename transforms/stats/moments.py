"""The exact statistics of a batch's numbers: NaNs, zeros, min, max, infinities, mean and the
sum of squared deviations (over the finite numbers).

Integers take two compiled passes that the compiler vectorises (sums reassociated). Most
batches of floats hold neither NaN nor an infinity: numpy's min and max (vectorised; NaN spreads
to them) find that out, and two such passes give the rest. A batch with a NaN or an infinity
takes the compiled passes that check each value.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["moments"]

_REASSOC = {"reassoc", "nsz"}  # sums in any order (vectorised); NaN and infinities still exact


@njit(cache=True, fastmath=_REASSOC)
def _finite_moments(values: np.ndarray) -> tuple:  # pragma: no cover
    """(zeros, mean, sum of squared deviations) of numbers that are all finite."""
    n = len(values)
    zeros = 0
    total = 0.0
    for i in range(n):
        v = np.float64(values[i])
        total += v
        zeros += np.int64(v == 0.0)
    mean = total / n
    m2 = 0.0
    for i in range(n):
        d = np.float64(values[i]) - mean
        m2 += d * d
    return zeros, mean, m2


@njit(cache=True, fastmath=_REASSOC)
def _int_moments(values: np.ndarray) -> tuple:  # pragma: no cover
    """(zeros, min, max, mean, sum of squared deviations) of integers, in two passes."""
    n = len(values)
    zeros = 0
    total = 0.0
    low = high = values[0]
    for i in range(n):
        v = values[i]
        total += np.float64(v)
        zeros += np.int64(v == 0)
        low = v if v < low else low
        high = v if v > high else high
    mean = total / n
    m2 = 0.0
    for i in range(n):
        d = np.float64(values[i]) - mean
        m2 += d * d
    return zeros, low, high, mean, m2


@njit(cache=True)
def _moments(values: np.ndarray) -> tuple:  # pragma: no cover
    nans = zeros = count = negative = positive = 0
    low, high, total = np.inf, -np.inf, 0.0
    for i in range(len(values)):
        v = np.float64(values[i])
        if v != v:
            nans += 1
            continue
        count += 1
        if v == 0.0:
            zeros += 1
        if v < low:
            low = v
        if v > high:
            high = v
        if v == np.inf:
            positive += 1
        elif v == -np.inf:
            negative += 1
        else:
            total += v
    finite = count - negative - positive
    mean = total / finite if finite else 0.0
    m2 = 0.0
    for i in range(len(values)):
        v = np.float64(values[i])
        if v == v and v != np.inf and v != -np.inf:
            d = v - mean
            m2 += d * d
    return nans, zeros, count, low, high, negative, positive, mean, m2


def moments(values: np.ndarray) -> tuple[int, int, int, float, float, int, int, float, float]:
    """(NaNs, zeros, numbers that are not NaN, min, max, -inf count, +inf count, mean of the
    finite numbers, their sum of squared deviations from it) of an int64, float32 or float64
    array."""
    values = np.ascontiguousarray(values)
    if len(values) and values.dtype.kind in "iu":  # integers: neither NaN nor infinities
        zeros, low, high, mean, m2 = _int_moments(values)
        return 0, zeros, len(values), float(low), float(high), 0, 0, mean, m2
    if len(values):
        low, high = float(values.min()), float(values.max())
        if math.isfinite(low) and math.isfinite(high):  # no NaN, no infinity
            zeros, mean, m2 = _finite_moments(values)
            return 0, zeros, len(values), low, high, 0, 0, mean, m2
    return _moments(values)
