"""A stable 64-bit hash of strings, vectorized over Arrow buffers (numba).

hash(v) = fmix64(fnv1a64(bytes(v))), where
  fnv1a64:  h = 0xcbf29ce484222325; for each byte b: h = (h ^ b) * 0x100000001b3  (mod 2**64)
  fmix64:   MurmurHash3's finalizer: h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33;
            h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33                               (mod 2**64)
and bytes(v) is the UTF-8 text of a string, the bytes of a binary value, and the decimal text
of an integer ("-12"). The finalizer spreads every input bit over the low bits, which FNV-1a
alone does not (its value mod 2**k depends only on the low k bits of each byte). The hash
depends on nothing but the bytes: not on the process, machine, Python's hash seed or versions.

FNV-1a reads a byte per dependent multiply: one value alone hashes at about 0.7 GB/s here,
many values of 40 bytes or more on four lanes (`hash_ranges_kernel`) at 1.2-2.0 GB/s. Where
only a count of distinct values needs a hash (a bytes feature's statistics) and values are long
(a file's contents), `xxh64_range` is XXH64 (seed 0, Yann Collet's xxHash, as the `xxhash`
package computes it), which reads eight bytes a step on four independent lanes: 65 MB of 6.5 KB
values hash in 0.006 s against 0.071 s with FNV-1a (this project's 2-core machine). It reads
the words through `word_views`: eight uint64 views of the buffer, one per byte alignment, so a
value's words are read whole wherever it starts.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from transforms.encode.kernel.memory import load_i64

__all__ = [
    "FNV_OFFSET",
    "hash_bytes",
    "hash_column",
    "hash_range",
    "hash_ranges",
    "hash_ranges_kernel",
    "word_views",
    "xxh64_range",
]

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S8 = np.uint64(8)
_BYTE = np.uint64(0xFF)
# words are loaded in the machine's byte order; the hash reads a value's bytes first to last
_LITTLE_ENDIAN = sys.byteorder == "little"


@njit(cache=True, inline="always")
def _fnv1a(data: np.ndarray, start: int, end: int, h: np.uint64) -> np.uint64:  # pragma: no cover
    for j in range(start, end):
        h = (h ^ np.uint64(data[j])) * _FNV_PRIME
    return h


@njit(cache=True, inline="always")
def _final_mix(h: np.uint64) -> np.uint64:  # pragma: no cover
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


@njit(cache=True, inline="always")
def hash_range(
    data: np.ndarray, start: int, end: int, h: np.uint64
) -> np.uint64:  # pragma: no cover
    """The hash of `data[start:end]` from the FNV-1a state `h` (`FNV_OFFSET`, or a salt's
    state): FNV-1a 64 over the bytes, then a final mix. The one definition of the hash, for
    the compiled loops that hash values (here, and the statistics' counting)."""
    return _final_mix(_fnv1a(data, start, end, h))


@njit(cache=True, inline="always")
def _load_word(address: int) -> np.uint64:  # pragma: no cover
    """The eight bytes at `address` as a word whose lowest byte is the first."""
    word = np.uint64(load_i64(address))
    if not _LITTLE_ENDIAN:
        swapped = np.uint64(0)
        for _ in range(8):
            swapped = (swapped << _S8) | (word & _BYTE)
            word >>= _S8
        word = swapped
    return word


@njit(cache=True, inline="always")
def _words_then_rest(
    h: np.uint64, data: np.ndarray, base: int, p: int, end: int
) -> np.uint64:  # pragma: no cover
    """`hash_range` of data[p:end] from the state `h`, its whole words read eight bytes at a
    time (`base`: the address of data[0])."""
    while end - p >= 8:
        word = _load_word(base + p)
        for _ in range(8):
            h = (h ^ (word & _BYTE)) * _FNV_PRIME
            word >>= _S8
        p += 8
    return _final_mix(_fnv1a(data, p, end, h))


@njit(cache=True)
def hash_ranges_kernel(
    starts: np.ndarray, ends: np.ndarray, data: np.ndarray, prefix: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """hash(prefix + data[starts[i]:ends[i]]) for each i (prefix: a salt, or empty).

    The same hash as `hash_range`, on four lanes: FNV-1a is one chain of dependent multiplies
    per value, so one value at a time leaves the multiplier waiting. Each lane holds a value and
    all four step a word (eight bytes, one load) at a time for as many words as each has; a
    lane whose value has less than a word left finishes it and takes the next value, so the
    four chains stay side by side whatever the values' lengths. Against four consecutive values
    side by side over the bytes all four have, a byte load each, then each value's rest alone
    (the loop before): 1.6-1.8x faster on values of 40-350 bytes, 1.1x on 8-24 bytes (1.9-2.0
    GB/s against 1.1 GB/s at 300 bytes; `bench/hashing.py`, this project's 2-core machine)."""
    n = len(starts)
    out = np.empty(n, dtype=np.uint64)
    h0 = _fnv1a(prefix, 0, len(prefix), FNV_OFFSET)
    base = data.ctypes.data
    if n < 4:
        for i in range(n):
            out[i] = _words_then_rest(h0, data, base, starts[i], ends[i])
        return out
    # lane k: the value it hashes (r, -1 once stored), its next byte p, its end e, its state;
    # written out four times, not as arrays: sixteen scalars the compiler keeps in registers
    r0, r1, r2, r3 = 0, 1, 2, 3
    p0, p1, p2, p3 = starts[0], starts[1], starts[2], starts[3]
    e0, e1, e2, e3 = ends[0], ends[1], ends[2], ends[3]
    a, b, c, d = h0, h0, h0, h0
    taken = 4
    while True:
        if e0 - p0 < 8:
            out[r0] = _words_then_rest(a, data, base, p0, e0)
            r0 = -1
            if taken == n:
                break
            r0, p0, e0, a = taken, starts[taken], ends[taken], h0
            taken += 1
        if e1 - p1 < 8:
            out[r1] = _words_then_rest(b, data, base, p1, e1)
            r1 = -1
            if taken == n:
                break
            r1, p1, e1, b = taken, starts[taken], ends[taken], h0
            taken += 1
        if e2 - p2 < 8:
            out[r2] = _words_then_rest(c, data, base, p2, e2)
            r2 = -1
            if taken == n:
                break
            r2, p2, e2, c = taken, starts[taken], ends[taken], h0
            taken += 1
        if e3 - p3 < 8:
            out[r3] = _words_then_rest(d, data, base, p3, e3)
            r3 = -1
            if taken == n:
                break
            r3, p3, e3, d = taken, starts[taken], ends[taken], h0
            taken += 1
        # the words every lane has (none when a lane just took a value shorter than a word)
        for _ in range(min(min(e0 - p0, e1 - p1), min(e2 - p2, e3 - p3)) >> 3):
            w0 = _load_word(base + p0)
            w1 = _load_word(base + p1)
            w2 = _load_word(base + p2)
            w3 = _load_word(base + p3)
            for _ in range(8):
                a = (a ^ (w0 & _BYTE)) * _FNV_PRIME
                b = (b ^ (w1 & _BYTE)) * _FNV_PRIME
                c = (c ^ (w2 & _BYTE)) * _FNV_PRIME
                d = (d ^ (w3 & _BYTE)) * _FNV_PRIME
                w0 >>= _S8
                w1 >>= _S8
                w2 >>= _S8
                w3 >>= _S8
            p0 += 8
            p1 += 8
            p2 += 8
            p3 += 8
    # no value left to take: the other lanes finish theirs alone
    if r0 >= 0:
        out[r0] = _words_then_rest(a, data, base, p0, e0)
    if r1 >= 0:
        out[r1] = _words_then_rest(b, data, base, p1, e1)
    if r2 >= 0:
        out[r2] = _words_then_rest(c, data, base, p2, e2)
    if r3 >= 0:
        out[r3] = _words_then_rest(d, data, base, p3, e3)
    return out


# -- XXH64 -----------------------------------------------------------------------------------

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def word_views(data: np.ndarray) -> tuple[np.ndarray, ...]:
    """Eight uint64 views of the uint8 buffer `data`: view `s` holds the words that start at
    the byte offsets s, s + 8, s + 16, ... (unaligned views: x86 and ARM64 load them whole)."""
    return tuple(data[s : s + 8 * (max(0, len(data) - s) // 8)].view(np.uint64) for s in range(8))


@njit(cache=True, inline="always")
def _rotl(x: np.uint64, r: int) -> np.uint64:  # pragma: no cover
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def _round(acc: np.uint64, word: np.uint64) -> np.uint64:  # pragma: no cover
    return _rotl(acc + word * _P2, 31) * _P1


@njit(cache=True, inline="always")
def _merge_round(acc: np.uint64, lane: np.uint64) -> np.uint64:  # pragma: no cover
    return (acc ^ _round(np.uint64(0), lane)) * _P1 + _P4


@njit(cache=True)
def xxh64_range(
    views: tuple, data: np.ndarray, start: int, end: int
) -> np.uint64:  # pragma: no cover
    """XXH64 (seed 0) of `data[start:end]`, its words read through `views` (`word_views`)."""
    p = start
    words = views[start & 7]  # every word read starts at start + 8k: one view, chosen once
    if end - start >= 32:
        v1, v2, v3, v4 = _P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1
        while p + 32 <= end:
            v1 = _round(v1, words[p >> 3])
            v2 = _round(v2, words[(p + 8) >> 3])
            v3 = _round(v3, words[(p + 16) >> 3])
            v4 = _round(v4, words[(p + 24) >> 3])
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge_round(_merge_round(_merge_round(_merge_round(h, v1), v2), v3), v4)
    else:
        h = _P5
    h += np.uint64(end - start)
    while p + 8 <= end:
        h = _rotl(h ^ _round(np.uint64(0), words[p >> 3]), 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        low = np.uint64(data[p]) | (np.uint64(data[p + 1]) << np.uint64(8))
        word = low | (np.uint64(data[p + 2]) << np.uint64(16))
        word |= np.uint64(data[p + 3]) << np.uint64(24)
        h = _rotl(h ^ (word * _P1), 23) * _P2 + _P3
        p += 4
    while p < end:
        h = _rotl(h ^ (np.uint64(data[p]) * _P5), 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


_NO_PREFIX = np.empty(0, np.uint8)


def _hash_values(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    return hash_ranges_kernel(offsets[:-1], offsets[1:], data, _NO_PREFIX)


def hash_bytes(value: bytes) -> int:
    """The same hash for one value, in plain Python (the reference for the kernel)."""
    mask = (1 << 64) - 1
    h = int(FNV_OFFSET)
    for b in value:
        h = ((h ^ b) * int(_FNV_PRIME)) & mask
    h ^= h >> 33
    h = (h * int(_M1)) & mask
    h ^= h >> 33
    h = (h * int(_M2)) & mask
    h ^= h >> 33
    return h


def _as_large_binary(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_integer(t):
        arr = pc.cast(arr, pa.string())
    if not pa.types.is_large_binary(arr.type):
        arr = pc.cast(arr, pa.large_binary())
    return arr


def hash_column(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 hash of every value of a string, binary or integer column (nulls hash as b"")."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = _as_large_binary(arr)
    if len(arr) == 0:
        return np.empty(0, dtype=np.uint64)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return _hash_values(offsets, data)


def hash_ranges(starts: np.ndarray, ends: np.ndarray, data: np.ndarray, salt: str) -> np.ndarray:
    """uint64 hash of salt + data[starts[i]:ends[i]] for each i."""
    salt_bytes = np.frombuffer(salt.encode("utf-8"), np.uint8) if salt else np.empty(0, np.uint8)
    return hash_ranges_kernel(
        np.asarray(starts, np.int64), np.asarray(ends, np.int64), data, salt_bytes
    )
