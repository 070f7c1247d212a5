"""The project's hash (transforms/hashing.py): the compiled kernel that hashes many values at
once against the plain-Python definition, on the lengths, orders and places where its lanes
and word loads could go wrong."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.hashing import FNV_OFFSET, hash_bytes, hash_range, hash_ranges, hash_ranges_kernel


def _expected(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, salt: bytes) -> list[int]:
    raw = data.tobytes()
    ranges = zip(starts.tolist(), ends.tolist(), strict=True)
    return [hash_bytes(salt + raw[a:b]) for a, b in ranges]


def test_the_hash_of_known_values_does_not_change():
    # fixed by the contract (split membership, shuffle order and vocabulary buckets rely on it)
    assert hash_bytes(b"") == 0xEFD01F60BA992926
    assert hash_bytes(b"a") == 0x82A2A958A9BECE5B
    data = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    got = hash_ranges(np.array([0, 0, 3]), np.array([0, 1, 26]), data, "")
    expected = [hash_bytes(b""), hash_bytes(b"a"), hash_bytes(b"defghijklmnopqrstuvwxyz")]
    assert got.tolist() == expected


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 7, 8, 9, 61])
@pytest.mark.parametrize(
    "lengths", [(0, 1), (0, 9), (7, 10), (8, 9), (15, 18), (0, 70), (300, 301)]
)
def test_many_values_hash_as_each_alone(count, lengths):
    rng = np.random.default_rng(count * 1000 + lengths[0])
    sizes = rng.integers(lengths[0], lengths[1], count)
    ends = np.cumsum(sizes).astype(np.int64)
    starts = ends - sizes
    data = rng.integers(0, 256, int(ends[-1]) if count else 0, dtype=np.uint8)  # no slack after
    for salt in ("", "shuffle:7"):
        expected = _expected(data, starts, ends, salt.encode())
        assert hash_ranges(starts, ends, data, salt).tolist() == expected


def test_values_in_any_order_overlapping_and_unaligned():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 4099, dtype=np.uint8)
    starts = rng.integers(0, 4000, 500).astype(np.int64)  # any byte alignment, overlapping
    ends = np.minimum(starts + rng.integers(0, 99, 500), len(data)).astype(np.int64)
    assert hash_ranges(starts, ends, data, "s").tolist() == _expected(data, starts, ends, b"s")
    # a view that starts at an odd address: the words are loaded unaligned
    odd = data[3:]
    assert hash_ranges(starts[:50], ends[:50] - 3, odd, "").tolist() == _expected(
        odd, starts[:50], ends[:50] - 3, b""
    )


def test_one_long_value_among_short_ones():
    # a lane keeps its value for thousands of words while the others take many values
    rng = np.random.default_rng(9)
    sizes = np.array([3, 40_000, 5, 0, 12, 1, 9, 8, 2_001, 7, 16], np.int64)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    data = rng.integers(0, 256, int(ends[-1]), dtype=np.uint8)
    assert hash_ranges(starts, ends, data, "").tolist() == _expected(data, starts, ends, b"")


def test_the_kernel_and_the_one_value_hash_agree():
    data = np.frombuffer(b"0123456789abcdefXYZ", np.uint8)
    prefix = np.frombuffer(b"salt", np.uint8)
    many = hash_ranges_kernel(np.array([0, 2, 5]), np.array([19, 18, 5]), data, prefix)
    state = FNV_OFFSET
    for b in b"salt":
        state = np.uint64((int(state) ^ b) * 0x100000001B3 % 2**64)
    one = [hash_range(data, a, b, state) for a, b in ((0, 19), (2, 18), (5, 5))]
    assert many.tolist() == [int(h) for h in one]
