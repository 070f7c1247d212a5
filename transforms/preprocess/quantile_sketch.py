"""The quantile sketch of `bucketize` and of a median `fill_missing`: Apache Beam's
`ApproximateQuantilesCombineFn` (apache_beam/transforms/stats.py, Beam 2.77.0, Apache License
2.0, as this project), its unweighted, batched, natural-order path, without Beam.

Why a copy: importing the class imports all of Beam (and pandas through it), 1.3-1.4 s of CPU on
a 2-core machine where the rest of a local job's start-up takes about 0.5 s. In a 1.26M-row run
of configs/taxi_preprocess.yaml on the in-process engine (py-spy, one worker) the fit with Beam's
class held 41% of the samples: its import about a fifth, its sketch (Beam compiles the module
with Cython; the values are still Python objects) the rest. The code here is Beam's, statement
for statement, but for its sorts and its walk over the sorted values, which numpy does: Beam
sorts lists of (value, weight) pairs, up to 260,000 in a merge of 17 full buffers, and a copy in
plain Python spent a quarter of the same run's samples there. The boundaries a job fits are the
ones it fitted with Beam's class, on both engines (tests/test_quantile_sketch.py compares the
two on random inputs, batch sizes and merges, exactly, types and signed zeros included). What is
left out is what the project never asks for: weights, a sort key, reverse order, one element at
a time.

The algorithm: Manku, Rajagopalan & Lindsay, "Approximate Medians and other Quantiles in One
Pass and with Limited Memory", SIGMOD 1998 ("New Algorithm"), with Munro-Paterson's choice of
the buffer size `k` and the number of buffers `b`: for N < 1e9 values the i-th of n quantiles
has a rank within epsilon * N of the exact one.

    fn = QuantileSketch.create(num_quantiles=11, epsilon=0.001)
    acc = fn.add_input(fn.create_accumulator(), values)   # a numpy array, one batch
    acc = fn.merge_accumulators([acc, other])
    fn.extract_output(acc)   # [min, 9 inner quantiles, max]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["QuantileSketch", "QuantileState"]


def _python(value: Any) -> Any:
    """A numpy scalar as the Python number Beam's lists hold (`tolist()` gives the same)."""
    return value.item() if isinstance(value, np.generic) else value


def _joined(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays end to end. Arrays of different dtypes (an int batch, then a float one) are
    joined as Python objects, as Beam's lists hold them: numpy would make the ints floats."""
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return np.empty(0)
    if len(arrays) == 1:
        return arrays[0]
    if any(a.dtype != arrays[0].dtype for a in arrays):
        return np.concatenate([a.astype(object) for a in arrays])
    return np.concatenate(arrays)


def _sorted(values: np.ndarray) -> np.ndarray:
    """`sorted(values)`: a stable sort, so equal values (-0.0 and 0.0) keep their order as in
    Python's."""
    return np.sort(values, kind="stable")


class _Buffer:
    """A full, sorted buffer of the algorithm: its elements stand for `weight` values each."""

    def __init__(
        self,
        elements: np.ndarray,
        weight: int,
        level: int = 0,
        min_val: Any = None,
        max_val: Any = None,
    ) -> None:
        self.elements = elements
        self.weights = [weight]  # as Beam's unweighted buffer: one weight for all its elements
        self.level = level
        if min_val is None or max_val is None:
            # a new buffer is sorted; a collapsed one may not hold the extremes it stands for
            self.min_val = _python(elements[0])
            self.max_val = _python(elements[-1])
        else:
            self.min_val = min_val
            self.max_val = max_val

    def __lt__(self, other: _Buffer) -> bool:
        return self.level < other.level


class QuantileState:
    """The accumulator: full buffers (a heap by level) and the values not yet in one."""

    def __init__(
        self,
        unbuffered_elements: np.ndarray,
        buffers: list[_Buffer],
        buffer_size: int,
        num_buffers: int,
    ) -> None:
        self.buffers = buffers
        self.unbuffered_elements = unbuffered_elements
        self.buffer_size = buffer_size
        self.num_buffers = num_buffers

    def is_empty(self) -> bool:
        return not self.unbuffered_elements.size and not self.buffers

    def add_unbuffered(self, elements: np.ndarray, offset_fn: Callable[[int], float]) -> None:
        """Add values; every `buffer_size` of them become a sorted buffer, and buffers past
        `num_buffers` are collapsed."""
        self.unbuffered_elements = _joined([self.unbuffered_elements, elements])
        size = self.buffer_size
        num_new_buffers = len(self.unbuffered_elements) // size
        for idx in range(num_new_buffers):
            to_buffer = _sorted(self.unbuffered_elements[idx * size : (idx + 1) * size])
            heapq.heappush(self.buffers, _Buffer(to_buffer, 1))
        if num_new_buffers > 0:  # a copy: not a view holding a whole batch
            self.unbuffered_elements = self.unbuffered_elements[num_new_buffers * size :].copy()
        self.collapse_if_needed(offset_fn)

    def finalize(self) -> None:
        """The values not in a buffer become one (before the output is read; no collapse
        follows, so it need not keep the heap's order)."""
        if self.unbuffered_elements.size:
            self.buffers.append(_Buffer(_sorted(self.unbuffered_elements), 1))
        self.unbuffered_elements = np.empty(0)

    def collapse_if_needed(self, offset_fn: Callable[[int], float]) -> None:
        while len(self.buffers) > self.num_buffers:
            to_collapse = [heapq.heappop(self.buffers), heapq.heappop(self.buffers)]
            min_level = to_collapse[1].level
            while self.buffers and self.buffers[0].level <= min_level:
                to_collapse.append(heapq.heappop(self.buffers))
            heapq.heappush(self.buffers, _collapse(to_collapse, offset_fn, self.buffer_size))


def _collapse(
    buffers: list[_Buffer], offset_fn: Callable[[int], float], buffer_size: int
) -> _Buffer:
    """One buffer of `buffer_size` elements standing for all of `buffers`."""
    new_level = 0
    new_weight = 0
    for buffer in buffers:
        # at least two buffers of the lowest level, in the paper; buffers merged from
        # independently built sketches may break that: the highest level + 1
        new_level = max([new_level, buffer.level + 1])
        new_weight = new_weight + sum(buffer.weights)
    step = new_weight
    offset = offset_fn(new_weight)
    new_elements, min_val, max_val = _interpolate(buffers, buffer_size, step, offset)
    return _Buffer(new_elements, new_weight, new_level, min_val, max_val)


def _interpolate(
    buffers: list[_Buffer], count: int, step: float, offset: float
) -> tuple[np.ndarray, Any, Any]:
    """The (k * step + offset)-th elements, 0 <= k < count, of the ordered union of the
    buffers' elements, each repeated as many times as its buffer's weight.

    Beam sorts the union as (element, weight) pairs and walks it in Python; here numpy does
    both, with the same result: a stable sort by element then weight is the pairs' order, the
    positions are the same float64 arithmetic (`int(j * step + offset)`), and the walk of
    the running weight is `searchsorted` on its cumulative sum (integers, exact)."""
    min_val = buffers[0].min_val
    max_val = buffers[0].max_val
    for buffer in buffers:
        min_val = buffer.min_val if buffer.min_val < min_val else min_val
        max_val = buffer.max_val if max_val < buffer.max_val else max_val
    elements = _joined([buffer.elements for buffer in buffers])
    targets = np.arange(count, dtype=np.float64)

    weight = buffers[0].weights[0]
    if all(buffer.weights[0] == weight for buffer in buffers):
        # one weight: the indices are evenly spread over the union
        offset = offset / weight
        step = step / weight
        picks = (targets * step + offset).astype(np.int64)
        np.minimum(picks, len(elements) - 1, out=picks)
        return _sorted(elements)[picks], min_val, max_val

    weights = np.repeat(
        np.array([buffer.weights[0] for buffer in buffers], dtype=np.int64),
        [len(buffer.elements) for buffer in buffers],
    )
    order = np.argsort(weights, kind="stable")  # by weight, then (stable) by element:
    order = order[np.argsort(elements[order], kind="stable")]  # the pairs' order
    running = np.cumsum(weights[order])
    # the first element whose running weight passes each target; the last one past them all
    picks = np.searchsorted(running, targets * step + offset, side="right")
    np.minimum(picks, len(order) - 1, out=picks)
    return elements[order[picks]], min_val, max_val


class QuantileSketch:
    """Beam's `ApproximateQuantilesCombineFn` with `input_batched=True`: the CombineFn
    protocol (create / add a batch / merge / extract) over `QuantileState`s."""

    _MAX_NUM_ELEMENTS = 1e9  # the rows the error bound holds for; the cost grows with its log

    def __init__(self, num_quantiles: int, buffer_size: int, num_buffers: int) -> None:
        self._num_quantiles = num_quantiles
        self._buffer_size = buffer_size
        self._num_buffers = num_buffers
        # the rounding of an even collapse alternates up and down (no bias): per instance, as
        # in Beam, where it is the CombineFn's own state
        self._offset_jitter = 0

    def __reduce__(self) -> tuple:
        return (QuantileSketch, (self._num_quantiles, self._buffer_size, self._num_buffers))

    @classmethod
    def create(cls, num_quantiles: int, epsilon: float | None = None) -> QuantileSketch:
        """A sketch for `num_quantiles` outputs (the minimum and maximum included) whose rank
        error stays below `epsilon` x N (default 1 / num_quantiles) for N < 1e9 values."""
        max_num_elements = cls._MAX_NUM_ELEMENTS
        if not epsilon:
            epsilon = 1.0 / num_quantiles
        b = 2
        while (b - 2) * (1 << (b - 2)) < epsilon * max_num_elements:
            b = b + 1
        b = b - 1
        k = max(2, math.ceil(max_num_elements / float(1 << (b - 1))))
        return cls(num_quantiles=num_quantiles, buffer_size=k, num_buffers=b)

    def _offset(self, new_weight: int) -> float:
        if new_weight % 2 == 1:
            return (new_weight + 1) / 2
        self._offset_jitter = 2 - self._offset_jitter
        return (new_weight + self._offset_jitter) / 2

    def create_accumulator(self) -> QuantileState:
        return QuantileState(np.empty(0), [], self._buffer_size, self._num_buffers)

    def add_input(self, state: QuantileState, elements: np.ndarray) -> QuantileState:
        """Add a batch of values: a 1-D numpy array of numbers (no NaN)."""
        if len(elements) == 0:
            return state
        state.add_unbuffered(elements, self._offset)
        return state

    def merge_accumulators(self, accumulators: Iterable[QuantileState]) -> QuantileState:
        merged = self.create_accumulator()
        for accumulator in accumulators:
            if accumulator.is_empty():
                continue
            merged.add_unbuffered(accumulator.unbuffered_elements, self._offset)
            merged.buffers.extend(accumulator.buffers)
        heapq.heapify(merged.buffers)
        merged.collapse_if_needed(self._offset)
        return merged

    def extract_output(self, state: QuantileState) -> list:
        """[minimum, num_quantiles - 2 evenly spaced quantiles, maximum]; [] when empty. The
        state is finalized (its loose values made a buffer) on the way."""
        if state.is_empty():
            return []
        state.finalize()
        total_weight = 0
        for buffer in state.buffers:
            total_weight += len(buffer.elements) * buffer.weights[0]
        step = total_weight / (self._num_quantiles - 1)
        offset = (total_weight - 1) / (self._num_quantiles - 1)
        quantiles, min_val, max_val = _interpolate(
            state.buffers, self._num_quantiles - 2, step, offset
        )
        return [min_val, *quantiles.tolist(), max_val]
