"""The sequence kernel: groups of steps in flat numpy form -> serialized tf.train.SequenceExamples.

A SequenceExample is a message with the context (a Features message, field 1) and the feature
lists (a FeatureLists message, field 2). The context of a group is exactly the body of the
Example the column-wise Example kernel writes for it (example.py): `0x0a len Features`. So the
context is encoded by that kernel, one "row" per group, and this kernel appends the feature
lists after it:

  SequenceExample = 0x0a len Features | 0x12 len FeatureLists
  FeatureLists    = (0x0a len FeatureListEntry)*        map<string, FeatureList>, keys sorted
  FeatureListEntry = 0x0a len key | 0x12 len FeatureList
  FeatureList     = (0x0a len Feature)*                 one Feature per step, in step order
  Feature         = 0x0a len BytesList | 0x12 len FloatList | 0x1a len Int64List
A step with no value (a null) is an empty Feature (0x0a 0x00): its kind is unset, as in the
Example where a null feature is absent. With the keys in sorted order the bytes equal
`SerializeToString(deterministic=True)` (for keys where no key is a prefix of another, see
the README on Python's upb protobuf).

Step columns come as KernelColumns over all the steps of a batch (step i of every column is
the same source row); group g holds the steps group_off[g]:group_off[g+1]. Two passes, as the
Example kernel: every Feature's size, then each record written whole (framing included).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.crc import CRC_TABLE, hardware_crc32c_address, mask_crc
from transforms.encode.kernel.example import (  # the Example kernel's descriptor and crc pass
    KernelColumn,
    _describe,
    _table_crcs,
    encode_records,
)
from transforms.encode.kernel.layout import (
    DATA,
    KEY_LEN,
    KEY_OFF,
    KIND,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT64,
    ROW_OFF,
    VALID,
    VALUES,
    has_value,
)
from transforms.encode.kernel.memory import (
    call_u32_of_bytes,
    load_i64,
    store_u8,
    store_u32,
    store_u64,
)
from transforms.encode.kernel.wire import (
    TAG_BYTES,
    TAG_FLOAT,
    TAG_INT64,
    copy_bytes,
    entry_sizes,
    put_key_prefix,
    put_varint,
    varint_size,
)
from transforms.write.tfrecord import FOOTER_BYTES, FRAME_OVERHEAD, HEADER_BYTES, LENGTH_BYTES

__all__ = ["encode_sequences"]

_SLACK = 8  # bytes past the output the word copies may write
_CRC_FN = hardware_crc32c_address()


@njit(cache=True)
def _step_sizes(desc, n):  # noqa: ANN001, ANN202
    """Per column and step: the Feature message's length (-1: no value, an empty Feature) and
    the list payload (packed values, or the bytes values with their tags and lengths)."""
    ncols = desc.shape[0]
    flen = np.empty((ncols, n), dtype=np.int64)
    payload = np.zeros((ncols, n), dtype=np.int64)
    for c in range(ncols):
        kind, valid, row_off, values = (
            desc[c, KIND],
            desc[c, VALID],
            desc[c, ROW_OFF],
            desc[c, VALUES],
        )
        for i in range(n):
            if not has_value(valid, i):
                flen[c, i] = -1
                continue
            lo, count = i, 1
            if row_off != 0:
                lo = load_i64(row_off + 8 * i)
                count = load_i64(row_off + 8 * i + 8) - lo
            p = 0
            if kind == KIND_FLOAT:
                p = 4 * count
            elif kind == KIND_INT64:
                for j in range(lo, lo + count):
                    p += varint_size(load_i64(values + 8 * j))
            else:
                for j in range(lo, lo + count):
                    k = load_i64(values + 8 * j + 8) - load_i64(values + 8 * j)
                    p += 1 + varint_size(k) + k
            payload[c, i] = p
            flen[c, i] = entry_sizes(p, count, kind != KIND_BYTES, 0)[1]
    return flen, payload


@njit(cache=True)
def _write_feature(q, kind, row_off, values, data, i, p):  # noqa: ANN001, ANN202
    """Step i's Feature body (its values) at address q; p: its list payload."""
    lo, count = i, 1
    if row_off != 0:
        lo = load_i64(row_off + 8 * i)
        count = load_i64(row_off + 8 * i + 8) - lo
    if kind == KIND_BYTES:
        store_u8(q, TAG_BYTES)
        q = put_varint(q + 1, p)
        for j in range(lo, lo + count):
            a = load_i64(values + 8 * j)
            b = load_i64(values + 8 * j + 8) - a
            store_u8(q, 0x0A)
            q = put_varint(q + 1, b)
            copy_bytes(q, data + a, b)
            q += b
        return q
    store_u8(q, TAG_FLOAT if kind == KIND_FLOAT else TAG_INT64)
    if count == 0:
        store_u8(q + 1, 0)
        return q + 2
    q = put_varint(q + 1, 1 + varint_size(p) + p)
    store_u8(q, 0x0A)
    q = put_varint(q + 1, p)
    if kind == KIND_FLOAT:
        copy_bytes(q, values + 4 * lo, 4 * count)
        return q + 4 * count
    for j in range(lo, lo + count):
        q = put_varint(q, load_i64(values + 8 * j))
    return q


@njit(cache=True)
def _encode(desc, keys, flen, payload, group_off, has_steps, ctx, ctx_off, framed, crc_fn):  # noqa: ANN001, ANN202
    ncols = desc.shape[0]
    n = group_off.shape[0] - 1
    list_len = np.zeros((n, ncols), dtype=np.int64)  # each FeatureList message
    lists_len = np.zeros(n, dtype=np.int64)  # each FeatureLists message
    frame = FRAME_OVERHEAD if framed else 0
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for g in range(n):
        total = 0
        if has_steps[g]:
            for c in range(ncols):
                s = 0
                for i in range(group_off[g], group_off[g + 1]):
                    f = max(flen[c, i], 0)
                    s += 1 + varint_size(f) + f
                list_len[g, c] = s
                kl = desc[c, KEY_LEN]
                entry = 1 + varint_size(kl) + kl + 1 + varint_size(s) + s
                total += 1 + varint_size(entry) + entry
        lists_len[g] = total
        body = ctx_off[g + 1] - ctx_off[g] + 1 + varint_size(total) + total
        offsets[g + 1] = offsets[g] + body + frame
    buf = np.empty(offsets[n] + _SLACK, dtype=np.uint8)
    base, cbase, kbase = buf.ctypes.data, ctx.ctypes.data, keys.ctypes.data
    for g in range(n):
        q = base + offsets[g]
        if framed:
            store_u64(q, offsets[g + 1] - offsets[g] - FRAME_OVERHEAD)
            if crc_fn != 0:
                store_u32(q + LENGTH_BYTES, mask_crc(np.int64(call_u32_of_bytes(crc_fn, q, 8))))
            q += HEADER_BYTES
        start = q
        k = ctx_off[g + 1] - ctx_off[g]
        copy_bytes(q, cbase + ctx_off[g], k)
        q += k
        store_u8(q, 0x12)
        q = put_varint(q + 1, lists_len[g])
        if has_steps[g]:
            for c in range(ncols):
                kind, row_off = desc[c, KIND], desc[c, ROW_OFF]
                values, data, kl = desc[c, VALUES], desc[c, DATA], desc[c, KEY_LEN]
                s = list_len[g, c]
                store_u8(q, 0x0A)
                q = put_varint(q + 1, 1 + varint_size(kl) + kl + 1 + varint_size(s) + s)
                q = put_key_prefix(q, kbase + desc[c, KEY_OFF], kl)
                store_u8(q, 0x12)
                q = put_varint(q + 1, s)
                for i in range(group_off[g], group_off[g + 1]):
                    f = flen[c, i]
                    store_u8(q, 0x0A)
                    if f < 0:
                        store_u8(q + 1, 0)
                        q += 2
                        continue
                    q = put_varint(q + 1, f)
                    q = _write_feature(q, kind, row_off, values, data, i, payload[c, i])
        if framed:
            if crc_fn != 0:
                store_u32(q, mask_crc(np.int64(call_u32_of_bytes(crc_fn, start, q - start))))
            q += FOOTER_BYTES
        if q != base + offsets[g + 1]:
            raise AssertionError("sequence encoder: a record's size differs from its plan")
    return buf[: offsets[n]], offsets


def encode_sequences(
    context: list[KernelColumn],
    steps: list[KernelColumn],
    group_off: np.ndarray,
    has_steps: np.ndarray | None = None,
    framed: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Serialize one SequenceExample per group.

    `context`: columns with one row per group (in key order); `steps`: columns with one row per
    step (in key order), group g's steps being rows group_off[g]:group_off[g+1]; `has_steps[g]`
    False writes no feature list at all for group g (a null list; None: every group has them).
    Returns (buffer, offsets) as `encode_records`: record g is buffer[offsets[g]:offsets[g+1]],
    a TFRecord frame each with `framed`.
    """
    group_off = np.ascontiguousarray(group_off, dtype=np.int64)
    n = group_off.shape[0] - 1
    if n < 0 or (n and (group_off[0] != 0 or np.any(np.diff(group_off) < 0))):
        raise ValueError("group_off must start at 0 and never decrease")
    m = int(group_off[-1]) if n >= 0 else 0
    if has_steps is None:
        has_steps = np.ones(n, dtype=np.bool_)
    has_steps = np.ascontiguousarray(has_steps, dtype=np.bool_)
    if has_steps.shape[0] != n:
        raise ValueError(f"has_steps has {has_steps.shape[0]} entries for {n} groups")
    ctx, ctx_off = encode_records(context, n, framed=False)
    desc, keys, keep = _describe(steps, m)
    flen, payload = _step_sizes(desc, m)
    buf, offsets = _encode(
        desc, keys, flen, payload, group_off, has_steps, ctx, ctx_off, framed, _CRC_FN
    )
    del keep  # the arrays `desc` points into live until here
    if framed and _CRC_FN == 0:
        _table_crcs(buf, offsets, CRC_TABLE)
    return buf, offsets
