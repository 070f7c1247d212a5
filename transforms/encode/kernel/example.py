"""The hot loop: columns in flat numpy form -> serialized tf.train.Example records.

Written by hand (compiled with numba) because no library serializes Examples column-wise:
protobuf and TensorFlow need one message object per row (about 26k rows/s per core), and
tfx_bsl's C++ encoder is tied to its own pyarrow pin. Here every size is computed once per
column, each output byte is written once, and the optional TFRecord framing (length, masked
crc32c, data, masked crc32c) is written in the same buffer, so a batch leaves as one block.

Wire format (proto3, tensorflow/core/example/{example,feature}.proto):
  Example   = 0x0a len Features
  Features  = (0x0a len MapEntry)*          map<string, Feature>, keys written in sorted order
  MapEntry  = 0x0a len key 0x12 len Feature
  Feature   = 0x0a len BytesList | 0x12 len FloatList | 0x1a len Int64List
  BytesList = (0x0a len bytes)*
  FloatList = [0x0a len float32*]         packed; omitted when empty
  Int64List = [0x0a len varint*]          packed; omitted when empty
With keys in sorted order the bytes equal `SerializeToString(deterministic=True)`.

One compiled call encodes a whole batch. It takes the columns as a table of addresses (one
row per column, `_describe`), so the same machine code serves every schema, and it writes
record after record, each whole (framing, features, data crc while the record is still in
cache), copying a precomputed header where a column's headers do not vary (layout.py):
2.8x less CPU than one call per column and chunk, of which the templates 1.3-1.4x (basic
table of bench/, measured alternately in one process).

Cost at worker start: the first compile takes 10-11 CPU-s (numba caches it beside the
package; compile_kernels() warms a container); loading the cached code 0.3-0.4 s.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.crc import (
    CRC_TABLE,
    crc32c,
    crc_of_range,
    hardware_crc32c_address,
    mask_crc,
    masked_crc32c,
)
from transforms.encode.kernel.layout import (
    BYTES_LIST,
    BYTES_SCALAR,
    DATA,
    FIELDS,
    FLOAT_FIXED,
    FLOAT_LIST,
    INT64_LIST,
    INT64_SCALAR,
    KEY_LEN,
    KEY_OFF,
    KIND,
    KIND_CODES,
    ROW_OFF,
    SLOTS,
    VALID,
    VALUES,
    has_value,
    plan,
)
from transforms.encode.kernel.memory import (
    call_u32_of_bytes,
    load_i64,
    load_u32,
    store_u8,
    store_u32,
    store_u64,
)
from transforms.encode.kernel.wire import (
    TAG_BYTES,
    TAG_FLOAT,
    TAG_INT64,
    copy_bytes,
    copy_padded,
    entry_sizes,
    put_entry_head,
    put_varint,
    varint_size,
)
from transforms.write.tfrecord import FOOTER_BYTES, FRAME_OVERHEAD, HEADER_BYTES, LENGTH_BYTES

__all__ = [
    "FRAME_OVERHEAD",
    "KernelColumn",
    "compile_kernels",
    "crc32c",
    "encode_records",
    "masked_crc32c",
]

_SLACK = 8  # bytes past the output the padded copies may write

_CRC_FN = hardware_crc32c_address()


class KernelColumn:
    """One feature in the kernel's flat form.

    valid[i]: whether row i has the feature (None: every row has it). Values of row i are
    elements row_off[i]:row_off[i+1] of `values` (int64 or float32), or for bytes of the value
    offsets `value_off` into `data`; row_off None means one element per row (element i).
    """

    __slots__ = ("data", "key", "kind", "row_off", "valid", "value_off", "values")

    def __init__(
        self,
        kind: str,
        key: str,
        valid: np.ndarray | None,
        row_off: np.ndarray | None,
        values: np.ndarray | None = None,
        value_off: np.ndarray | None = None,
        data: np.ndarray | None = None,
    ) -> None:
        self.kind = kind
        self.key = np.frombuffer(key.encode("utf-8"), dtype=np.uint8)
        self.valid = valid
        self.row_off = row_off
        self.values = values
        self.value_off = value_off
        self.data = data


def _check_extent(col: KernelColumn, n: int) -> None:
    """The kernel reads through addresses without bounds checks: refuse arrays too short for
    what the offsets say (offsets are non-decreasing, so their last entries bound the rest)."""

    def need(a: np.ndarray | None, size: int, what: str) -> None:
        if a is None or a.shape[0] < size:
            have = "none" if a is None else a.shape[0]
            raise ValueError(f"column {col.key.tobytes()!r}: {what} has {have}, needs {size}")

    if col.valid is not None:
        need(col.valid, n, "valid")
    elements = n
    if col.row_off is not None:
        need(col.row_off, n + 1, "row_off")
        elements = int(col.row_off[n])
    if col.kind == "bytes":
        need(col.value_off, elements + 1, "value_off")
        need(col.data, int(col.value_off[elements]), "data")
    else:
        need(col.values, elements, "values")


def _describe(
    columns: list[KernelColumn], n: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(descriptor table, concatenated keys, the arrays the addresses point into)."""
    desc = np.zeros((len(columns), FIELDS), dtype=np.int64)
    keep: list[np.ndarray] = []

    def address(a: np.ndarray | None, dtype: type | str) -> int:
        if a is None:
            return 0
        a = np.ascontiguousarray(a, dtype=dtype)
        keep.append(a)
        return a.__array_interface__["data"][0]

    key_off = 0
    for c, col in enumerate(columns):
        _check_extent(col, n)
        row = desc[c]
        row[KIND] = KIND_CODES[col.kind]
        valid = col.valid
        row[VALID] = 0 if valid is None or valid[:n].all() else address(valid, np.bool_)
        row[ROW_OFF] = address(col.row_off, np.int64)
        if col.kind == "bytes":
            row[VALUES] = address(col.value_off, np.int64)
            row[DATA] = address(col.data, np.uint8)
        else:
            row[VALUES] = address(col.values, np.int64 if col.kind == "int64" else "<f4")
        row[KEY_OFF], row[KEY_LEN] = key_off, col.key.shape[0]
        key_off += col.key.shape[0]
    keys = np.concatenate([c.key for c in columns]) if columns else np.empty(0, np.uint8)
    return desc, keys, keep


@njit(cache=True, inline="always")
def _write_entry(q, i, how, row_off, values, data, kl, m, prefix, width, tlen, size):  # noqa: ANN001, ANN202
    """One column's entry of row i at address q; returns the address after it.

    how: the column's mode; m: floats per row (FLOAT_FIXED); prefix: address of the column's
    templates, `width` apart; tlen: address of their lengths; size: the row's list payload
    (int64 and bytes lists)."""
    if how == FLOAT_FIXED:
        head = load_i64(tlen + 8)
        copy_padded(q, prefix + width, head)
        q += head
        lo = i if row_off == 0 else load_i64(row_off + 8 * i)
        if m == 1:
            store_u32(q, load_u32(values + 4 * lo))
        else:
            copy_bytes(q, values + 4 * lo, 4 * m)
        return q + 4 * m
    if how == INT64_SCALAR:
        v = load_i64(values + 8 * i)
        vs = varint_size(v)
        head = load_i64(tlen + 8 * vs)
        copy_padded(q, prefix + vs * width, head)
        return put_varint(q + head, v)
    if how == BYTES_SCALAR:
        a = load_i64(values + 8 * i)
        k = load_i64(values + 8 * i + 8) - a
        count, payload, tag = 1, 1 + varint_size(k) + k, TAG_BYTES
    else:
        lo = load_i64(row_off + 8 * i)
        count = load_i64(row_off + 8 * i + 8) - lo
        if how == FLOAT_LIST:
            payload, tag = 4 * count, TAG_FLOAT
        else:
            payload, tag = size, TAG_INT64 if how == INT64_LIST else TAG_BYTES
    packed = tag != TAG_BYTES
    sizes = entry_sizes(payload, count, packed, kl)
    q = put_entry_head(q, prefix, load_i64(tlen), tag, sizes, payload, packed and count > 0)
    if how == BYTES_SCALAR:
        store_u8(q, 0x0A)
        q = put_varint(q + 1, k)
        copy_bytes(q, data + a, k)
        return q + k
    if how == FLOAT_LIST:
        copy_bytes(q, values + 4 * lo, 4 * count)
        return q + 4 * count
    if how == INT64_LIST:
        for j in range(lo, lo + count):
            q = put_varint(q, load_i64(values + 8 * j))
        return q
    for j in range(lo, lo + count):
        a = load_i64(values + 8 * j)
        b = load_i64(values + 8 * j + 8) - a
        store_u8(q, 0x0A)
        q = put_varint(q + 1, b)
        copy_bytes(q, data + a, b)
        q += b
    return q


@njit(cache=True)
def _table_crcs(buf, offsets, table):  # noqa: ANN001, ANN202
    """Both masked crcs of every frame, with the table loop (no C library)."""
    for i in range(offsets.shape[0] - 1):
        p, end = offsets[i], offsets[i + 1] - FOOTER_BYTES
        length_crc = mask_crc(crc_of_range(buf, p, p + LENGTH_BYTES, table))
        data_crc = mask_crc(crc_of_range(buf, p + HEADER_BYTES, end, table))
        for j in range(4):
            buf[p + LENGTH_BYTES + j] = (length_crc >> (8 * j)) & 0xFF
            buf[end + j] = (data_crc >> (8 * j)) & 0xFF


@njit(cache=True)
def _encode(desc, keys, n, framed, crc_fn):  # noqa: ANN001, ANN202
    """(buffer, offsets) of n records; with `framed` and crc_fn 0 the crcs are left to
    _table_crcs."""
    tmpl, width, tlen, mode, count, slot, payload, features_len = plan(desc, keys, n)
    frame = FRAME_OVERHEAD if framed else 0
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + 1 + varint_size(features_len[i]) + features_len[i] + frame
    buf = np.empty(offsets[n] + _SLACK, dtype=np.uint8)
    base, tbase = buf.ctypes.data, tmpl.ctypes.data
    lbase, pbase = tlen.ctypes.data, payload.ctypes.data
    ncols = desc.shape[0]
    for i in range(n):
        q = base + offsets[i]
        if framed:
            store_u64(q, offsets[i + 1] - offsets[i] - FRAME_OVERHEAD)
            if crc_fn != 0:
                length_crc = call_u32_of_bytes(crc_fn, q, LENGTH_BYTES)
                store_u32(q + LENGTH_BYTES, mask_crc(np.int64(length_crc)))
            q += HEADER_BYTES
        start = q
        store_u8(q, 0x0A)
        q = put_varint(q + 1, features_len[i])
        for c in range(ncols):
            if has_value(desc[c, VALID], i):
                how = mode[c]
                size = 0
                if how == INT64_LIST or how == BYTES_LIST:
                    size = load_i64(pbase + 8 * (slot[c] * n + i))
                q = _write_entry(
                    q, i, how, desc[c, ROW_OFF], desc[c, VALUES], desc[c, DATA],
                    desc[c, KEY_LEN], count[c], tbase + c * SLOTS * width, width,
                    lbase + 8 * c * SLOTS, size,
                )  # fmt: skip
        if framed:
            if crc_fn != 0:
                store_u32(q, mask_crc(np.int64(call_u32_of_bytes(crc_fn, start, q - start))))
            q += FOOTER_BYTES
        if q != base + offsets[i + 1]:
            raise AssertionError("encoder: a record's size differs from its planned size")
    # tmpl, tlen and payload are read through their addresses only: returned, they live to
    # here (numba frees an array after its last use, and a freed large array is unmapped)
    return buf[: offsets[n]], offsets, (tmpl, tlen, payload)


def encode_records(
    columns: list[KernelColumn], num_rows: int, framed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Serialize `num_rows` Examples from `columns` (already in key order).

    Returns (buffer, offsets): record i is buffer[offsets[i]:offsets[i+1]]. With `framed`, each
    record is a complete TFRecord frame, so the buffer can be appended to a .tfrecord file as is.
    """
    desc, keys, keep = _describe(columns, num_rows)
    buf, offsets, _ = _encode(desc, keys, num_rows, framed, _CRC_FN)
    del keep  # the arrays `desc` points into live until here
    if framed and _CRC_FN == 0:
        _table_crcs(buf, offsets, CRC_TABLE)
    return buf, offsets


def compile_kernels() -> None:
    """Compile (or load from numba's cache) every kernel, e.g. while building a container."""
    n = 2
    valid, row_off = np.ones(n, np.bool_), np.arange(n + 1, dtype=np.int64)
    valid[1] = False
    columns = [
        KernelColumn("bytes", "b", valid, None, value_off=row_off, data=np.zeros(n, np.uint8)),
        KernelColumn("float", "f", valid, None, values=np.zeros(n, np.float32)),
        KernelColumn("int64", "i", valid, row_off, values=np.zeros(n, np.int64)),
    ]
    for framed in (False, True):
        buf, offsets = encode_records(columns, n, framed)
    _table_crcs(buf, offsets, CRC_TABLE)  # the crcs without the C library
    crc32c(b"")
