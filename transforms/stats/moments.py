"""The exact statistics of a batch's numbers in two compiled passes (numba): NaNs, zeros, min,
max, infinities, mean and the sum of squared deviations (over the finite numbers)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["moments"]


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
    return _moments(np.ascontiguousarray(values))
