"""Protobuf wire pieces of a tf.train.Example map entry, as numba helpers inlined into the kernel.

A map entry (one feature of one record) is
  0x0a len(entry) | 0x0a len(key) key | 0x12 len(feature) | tag len(list) | [0x0a len(payload)]
followed by the values; the bracket is there for packed (int64, float) lists with values.
`key_prefix` (0x0a len(key) key) is the same for every entry of a column, and for a column
whose entries all have the same header (a float feature with n values per row; an int64
scalar whose varint has a given size) the kernel writes the whole header once as a template.

Varints are computed in int64 only: mixing uint64 and int64 makes numba compare in float64.
The helpers are inlined at numba level: 30-45% faster kernels than leaving it to LLVM
(measured alternately in one process), for a longer first compile that numba caches.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.memory import load_i64, load_u8, store_u8, store_u64

__all__ = [
    "copy_bytes",
    "copy_padded",
    "entry_sizes",
    "put_entry_head",
    "put_key_prefix",
    "put_varint",
    "varint_size",
]

TAG_BYTES, TAG_FLOAT, TAG_INT64 = 0x0A, 0x12, 0x1A


@njit(cache=True, inline="always")
def varint_size(v: int) -> int:
    """Bytes of the varint of v; a negative int64 takes 10 (as its two's complement)."""
    if v < 0:
        return 10
    n = 1
    while v >= 128:
        v >>= 7
        n += 1
    return n


@njit(cache=True, inline="always")
def put_varint(q: int, v: int) -> int:
    """Write the varint of v at address q; return the address after it."""
    if v < 0:
        # The low 63 bits come out the same under an arithmetic shift; the 10th byte is bit 63.
        for _ in range(9):
            store_u8(q, (v & 0x7F) | 0x80)
            v >>= 7
            q += 1
        store_u8(q, 1)
        return q + 1
    while v >= 128:
        store_u8(q, (v & 0x7F) | 0x80)
        v >>= 7
        q += 1
    store_u8(q, v)
    return q + 1


# Explicit signatures: one compiled version each, whatever literal arguments a caller passes
# (numba would otherwise compile one per combination of literals).
@njit("UniTuple(int64, 4)(int64, int64, boolean, int64)", cache=True)
def entry_sizes(payload: int, count: int, packed: bool, keylen: int) -> tuple[int, int, int, int]:
    """(list, feature, entry) message lengths of one feature of one record, and the bytes the
    entry takes in the Features message (tag and length included)."""
    if packed:
        list_len = 1 + varint_size(payload) + payload if count > 0 else 0
    else:
        list_len = payload
    feature_len = 1 + varint_size(list_len) + list_len
    entry_len = 1 + varint_size(keylen) + keylen + 1 + varint_size(feature_len) + feature_len
    return list_len, feature_len, entry_len, 1 + varint_size(entry_len) + entry_len


@njit(cache=True, inline="always")
def copy_padded(dst: int, src: int, n: int) -> None:
    """Copy n bytes from address src to address dst in 8-byte words: reads and writes up to 7
    bytes past n, so src must be padded and dst must have room (the kernel's templates and
    output are)."""
    for k in range(0, n, 8):
        store_u64(dst + k, load_i64(src + k))


@njit(cache=True)
def copy_bytes(dst: int, src: int, n: int) -> None:
    """Copy n bytes from address src to address dst, reading nothing past src + n (writes up
    to 7 bytes past dst + n)."""
    k = 0
    while k + 8 <= n:
        store_u64(dst + k, load_i64(src + k))
        k += 8
    if k < n:
        word = 0
        for j in range(n - k):
            word |= np.int64(load_u8(src + k + j)) << (8 * j)
        store_u64(dst + k, word)


@njit(cache=True)
def put_key_prefix(q: int, key: int, key_len: int) -> int:
    """0x0a len(key) key at address q; the key's bytes are at address `key`."""
    store_u8(q, 0x0A)
    q = put_varint(q + 1, key_len)
    for j in range(key_len):
        store_u8(q + j, load_u8(key + j))
    return q + key_len


@njit("int64(int64, int64, int64, int64, UniTuple(int64, 4), int64, boolean)", cache=True)
def put_entry_head(
    q: int,
    prefix: int,
    prefix_len: int,
    tag: int,
    sizes: tuple[int, int, int, int],
    payload: int,
    inner: bool,
) -> int:
    """An entry's header at address q (`sizes` from entry_sizes; `prefix`: address of the
    column's padded key prefix); `inner`: a packed list with values. Returns the address of
    the first value byte."""
    list_len, feature_len, entry_len, _ = sizes
    store_u8(q, 0x0A)
    q = put_varint(q + 1, entry_len)
    copy_padded(q, prefix, prefix_len)
    q += prefix_len
    store_u8(q, 0x12)
    q = put_varint(q + 1, feature_len)
    store_u8(q, tag)
    q = put_varint(q + 1, list_len)
    if inner:
        store_u8(q, 0x0A)
        q = put_varint(q + 1, payload)
    return q
