"""The first pass of the encoder kernel: how each column is written, its header templates,
and every record's size.

The kernel gets a batch's columns as a descriptor table: one row of int64 per column, its kind
and the addresses of its arrays (0: none; see example._describe). Per column the plan
picks a mode:
- FLOAT_FIXED: every record that has the feature has the same number of floats (a float
  scalar, a fixed-size float list): the whole entry header is one template, and a record's
  entry is that template and the value bytes.
- INT64_SCALAR: the header depends only on the size of the value's varint: ten templates.
- BYTES_SCALAR and the lists (INT64_LIST, FLOAT_LIST, BYTES_LIST): the header is computed per
  record around the column's key-prefix template; int64 and bytes lists keep each record's
  list payload (the sum of varint or value sizes) for the write pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.memory import load_i64, load_u8
from transforms.encode.kernel.wire import (
    TAG_FLOAT,
    TAG_INT64,
    entry_sizes,
    put_entry_head,
    put_key_prefix,
    varint_size,
)

__all__ = [
    "BYTES_LIST",
    "BYTES_SCALAR",
    "DATA",
    "FIELDS",
    "FLOAT_FIXED",
    "FLOAT_LIST",
    "INT64_LIST",
    "INT64_SCALAR",
    "KEY_LEN",
    "KEY_OFF",
    "KIND",
    "KIND_BYTES",
    "KIND_CODES",
    "KIND_FLOAT",
    "KIND_INT64",
    "ROW_OFF",
    "SLOTS",
    "VALID",
    "VALUES",
    "has_value",
    "plan",
    "row_count",
]

# A column's row in the descriptor table.
KIND, VALID, ROW_OFF, VALUES, DATA, KEY_OFF, KEY_LEN = range(7)
FIELDS = 7
KIND_INT64, KIND_FLOAT, KIND_BYTES = 0, 1, 2
KIND_CODES = {"int64": KIND_INT64, "float": KIND_FLOAT, "bytes": KIND_BYTES}

# How a column is written.
FLOAT_FIXED, INT64_SCALAR, BYTES_SCALAR, INT64_LIST, FLOAT_LIST, BYTES_LIST = range(6)
SLOTS = 11  # templates per column: 0 the key prefix; 1 (FLOAT_FIXED) or 1-10 (INT64_SCALAR,
# by the size of the value's varint) the entry header


@njit("boolean(int64, int64)", cache=True)
def has_value(valid: int, i: int) -> bool:
    """Whether row i has the feature (`valid`: address of the column's bools, 0: all do)."""
    return valid == 0 or load_u8(valid + i) != 0


@njit("int64(int64, int64)", cache=True)
def row_count(row_off: int, i: int) -> int:
    """Elements of row i (`row_off`: address of the int64 row offsets)."""
    return load_i64(row_off + 8 * i + 8) - load_i64(row_off + 8 * i)


@njit("int64(int64, int64, int64)", cache=True)
def _fixed_count(valid: int, row_off: int, n: int) -> int:
    """Elements per row if every row that has the feature has the same number, else -1."""
    if row_off == 0:
        return 1
    m = -1
    for i in range(n):
        if has_value(valid, i):
            k = row_count(row_off, i)
            if m < 0:
                m = k
            elif k != m:
                return -1
    return max(m, 0)


@njit("int64(int64, int64, int64, int64)", cache=True)
def _list_payload(kind: int, row_off: int, values: int, i: int) -> int:
    """Bytes of row i's int64 varints or of its bytes values (each with tag and length)."""
    s = 0
    for k in range(load_i64(row_off + 8 * i), load_i64(row_off + 8 * i + 8)):
        if kind == KIND_INT64:
            s += varint_size(load_i64(values + 8 * k))
        else:
            b = row_count(values, k)
            s += 1 + varint_size(b) + b
    return s


@njit(cache=True)
def plan(desc: np.ndarray, keys: np.ndarray, n: int) -> tuple:
    """Per column: how it is written and its templates (template s of column c at
    (c * SLOTS + s) * width, its length in tlen[c, s]); per row: the Features message
    length; per int64 or bytes list column: each row's list payload."""
    ncols = desc.shape[0]
    longest = 0
    for c in range(ncols):
        longest = max(longest, desc[c, KEY_LEN])
    width = 8 * (longest // 8) + 96
    tmpl = np.zeros(ncols * SLOTS * width, dtype=np.uint8)
    tlen = np.zeros((ncols, SLOTS), dtype=np.int64)
    mode = np.empty(ncols, dtype=np.int64)
    count = np.zeros(ncols, dtype=np.int64)
    slot = np.zeros(ncols, dtype=np.int64)
    nslots = 0
    for c in range(ncols):
        if desc[c, ROW_OFF] != 0 and desc[c, KIND] != KIND_FLOAT:
            slot[c] = nslots
            nslots += 1
    payload = np.zeros((nslots, n), dtype=np.int64)
    features_len = np.zeros(n, dtype=np.int64)
    tsize = np.zeros(SLOTS, dtype=np.int64)
    tbase = tmpl.ctypes.data
    for c in range(ncols):
        kind, valid, row_off = desc[c, KIND], desc[c, VALID], desc[c, ROW_OFF]
        values, kl = desc[c, VALUES], desc[c, KEY_LEN]
        prefix = tbase + c * SLOTS * width
        tlen[c, 0] = put_key_prefix(prefix, keys.ctypes.data + desc[c, KEY_OFF], kl) - prefix
        m = _fixed_count(valid, row_off, n) if kind == KIND_FLOAT else -1
        if m >= 0:
            mode[c], count[c] = FLOAT_FIXED, m
            sizes = entry_sizes(4 * m, m, True, kl)
            at = prefix + width
            end = put_entry_head(at, prefix, tlen[c, 0], TAG_FLOAT, sizes, 4 * m, m > 0)
            tlen[c, 1] = end - at
            for i in range(n):
                if has_value(valid, i):
                    features_len[i] += sizes[3]
        elif kind == KIND_FLOAT:
            mode[c] = FLOAT_LIST
            for i in range(n):
                if has_value(valid, i):
                    k = row_count(row_off, i)
                    features_len[i] += entry_sizes(4 * k, k, True, kl)[3]
        elif kind == KIND_INT64 and row_off == 0:
            mode[c] = INT64_SCALAR
            for vs in range(1, SLOTS):
                sizes = entry_sizes(vs, 1, True, kl)
                tsize[vs] = sizes[3]
                at = prefix + vs * width
                end = put_entry_head(at, prefix, tlen[c, 0], TAG_INT64, sizes, vs, True)
                tlen[c, vs] = end - at
            for i in range(n):
                if has_value(valid, i):
                    features_len[i] += tsize[varint_size(load_i64(values + 8 * i))]
        elif kind == KIND_BYTES and row_off == 0:
            mode[c] = BYTES_SCALAR
            for i in range(n):
                if has_value(valid, i):
                    k = row_count(values, i)
                    features_len[i] += entry_sizes(1 + varint_size(k) + k, 1, False, kl)[3]
        else:
            mode[c] = INT64_LIST if kind == KIND_INT64 else BYTES_LIST
            for i in range(n):
                if has_value(valid, i):
                    s = _list_payload(kind, row_off, values, i)
                    payload[slot[c], i] = s
                    sizes = entry_sizes(s, row_count(row_off, i), kind == KIND_INT64, kl)
                    features_len[i] += sizes[3]
    return tmpl, width, tlen, mode, count, slot, payload, features_len
