"""A batch's string or binary values counted in one compiled pass (numba): each distinct value
with its count, its first row and its 64-bit hash (transforms/hashing.py), and the values' byte
lengths (sum, least, most): what `pc.value_counts`, `hash_column` of its values and
`pc.binary_length` would give together, reading each value once.

Values meet in an open-addressing table keyed by their hash: two values are told apart by it (as
the top-k summary and HyperLogLog already do; two distinct values of one 64-bit hash in a split
are a chance of about n**2 / 2**65). The table doubles once half full: for the few distinct
values of a typical string column it stays small, in cache.

A bytes feature's values are only counted, never kept (`keep_values=False`): there a value of
`LONG_VALUE` bytes or more (a file's contents) is hashed with XXH64 (`xxh64_range`), about ten
times faster than FNV-1a; every process, worker and runner hashes a value the same way, so the
distinct counts merge. A string feature keeps FNV-1a for all its values: its top values are
matched by `hash_column` elsewhere.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from transforms.hashing import FNV_OFFSET, hash_range, word_views, xxh64_range

__all__ = ["LONG_VALUE", "CountedValues", "count_values"]

LONG_VALUE = 256  # bytes: from here a bytes feature's value is hashed with XXH64


@njit(cache=True)
def _table(hashes: np.ndarray, distinct: int, size: int) -> tuple:  # pragma: no cover
    """An open-addressing table of `size` slots holding the first `distinct` hashes: each
    slot's hash and the index of its value (-1: empty)."""
    slot_hash = np.zeros(size, np.uint64)
    slot = np.full(size, -1, np.int64)
    for d in range(distinct):
        at = np.int64(hashes[d] & np.uint64(size - 1))
        while slot[at] >= 0:
            at = (at + 1) & (size - 1)
        slot[at] = d
        slot_hash[at] = hashes[d]
    return slot_hash, slot


@njit(cache=True)
def _count(
    offsets: np.ndarray, data: np.ndarray, views: tuple, long: int
) -> tuple:  # pragma: no cover
    n = len(offsets) - 1
    size = 256
    slot_hash, slot = _table(np.empty(0, np.uint64), 0, size)
    hashes = np.empty(n, np.uint64)
    first = np.empty(n, np.int64)
    counts = np.zeros(n, np.int64)
    distinct = 0
    length_sum = 0
    low = np.iinfo(np.int64).max
    high = 0
    for i in range(n):
        start, end = np.int64(offsets[i]), np.int64(offsets[i + 1])
        length_sum += end - start
        low = min(low, end - start)
        high = max(high, end - start)
        if end - start >= long:
            h = xxh64_range(views, data, start, end)
        else:
            h = hash_range(data, start, end, FNV_OFFSET)  # transforms/hashing.py's hash
        at = np.int64(h & np.uint64(size - 1))
        while slot[at] >= 0 and slot_hash[at] != h:
            at = (at + 1) & (size - 1)
        if slot[at] >= 0:
            counts[slot[at]] += 1
            continue
        slot[at] = distinct
        slot_hash[at] = h
        hashes[distinct] = h
        first[distinct] = i
        counts[distinct] = 1
        distinct += 1
        if 2 * distinct > size:
            size *= 2
            slot_hash, slot = _table(hashes, distinct, size)
    return hashes[:distinct], first[:distinct], counts[:distinct], length_sum, low, high


@dataclasses.dataclass
class CountedValues:
    """The distinct values of a batch (in order of first appearance; None when not asked
    for), their counts and hashes (`hash_column`), and the byte lengths of all the values
    (None: no value)."""

    values: pa.Array | None
    counts: np.ndarray
    hashes: np.ndarray
    length_sum: int
    min_length: int | None
    max_length: int | None


def _is_variable_binary(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    )


def count_values(leaf: pa.Array, keep_values: bool = True) -> CountedValues:
    """Count the values of a string or binary array (nulls skipped). `keep_values=False`
    leaves the distinct values themselves out (`values` None): a bytes feature needs only
    their hashes and lengths, and a column of files' contents would be copied whole."""
    if leaf.null_count:
        leaf = leaf.drop_null()
    if not _is_variable_binary(leaf.type):
        leaf = pc.cast(leaf, pa.large_binary())
    if len(leaf) == 0:
        empty = np.empty(0, np.int64)
        kept = leaf if keep_values else None
        return CountedValues(kept, empty, np.empty(0, np.uint64), 0, None, None)
    large = pa.types.is_large_string(leaf.type) or pa.types.is_large_binary(leaf.type)
    _, offsets_buf, data_buf = leaf.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)
    offsets = offsets[leaf.offset : leaf.offset + len(leaf) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    long = LONG_VALUE if not keep_values else np.iinfo(np.int64).max
    hashes, first, counts, length_sum, low, high = _count(offsets, data, word_views(data), long)
    values = leaf.take(pa.array(first, pa.int64())) if keep_values else None
    return CountedValues(values, counts, hashes, int(length_sum), int(low), int(high))
