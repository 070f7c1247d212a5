"""The reading side of the wire format: tf.train.Example and SequenceExample records parsed
into flat value arrays, a batch of records per call, in compiled loops (numba).

The layout is the one the encoder writes (wire.py): Example.features = 1 (Features);
SequenceExample.context = 1 (Features), .feature_lists = 2 (FeatureLists); Features.feature = 1
and FeatureLists.feature_list = 1 are maps (entry key = 1, value = 2); a Feature holds one of
bytes_list = 1, float_list = 2, int64_list = 3, each a repeated field 1 (packed for floats and
int64s, as the encoder writes them; unpacked is read too, as protobuf reads it); a FeatureList is
a repeated Feature = 1. Any other field is skipped by its wire type, and of a key or a list given
twice the last one counts, as protobuf's parse does.

Three passes, so that every output array is allocated once, at its final size:

1. `locate` (locate.py, with the wire primitives): for each record, where the Feature (or
   FeatureList) of each wanted key lies; keys matched by the project's 64-bit hash, then byte
   for byte;
2. `count_values` (`count_steps`, `count_step_values` for feature lists): how many values each
   one holds (and their bytes, for bytes lists);
3. `fill_values` (`fill_step_values`): the values, into int64, float32 and bytes arrays at
   offsets the caller computes from the counts.

A record the parse cannot follow (a length past its end, a wire type protobuf rejects, a list of
another kind than the feature's) is marked, not guessed at: the caller names it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.locate import (
    BAD,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT64,
    locate,
    read_length,
    read_tag,
    read_varint,
    skip_field,
)

__all__ = [
    "BAD",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT64",
    "count_step_values",
    "count_steps",
    "count_values",
    "fill_step_values",
    "fill_values",
    "locate",
    "parse_values",
    "read_length",
    "read_tag",
    "read_varint",
    "skip_field",
]


@njit(cache=True, inline="always")
def _list_of(buf, p, end, kind):  # noqa: ANN001, ANN202
    """The (start, end) of a Feature's list of `kind` in buf[p:end]: (-1, -1) for an empty
    Feature (no list), (BAD, BAD) for another kind or a Feature that cannot be followed."""
    ls = le = -1
    while p < end:
        tag, p = read_tag(buf, p, end)
        if p < 0:
            return BAD, BAD
        field, wire = tag >> 3, tag & 7
        if wire == 2 and 1 <= field <= 3:
            n, p = read_length(buf, p, end)
            if p < 0:
                return BAD, BAD
            if field != kind:
                return BAD, BAD
            ls, le = p, p + n  # the last list given counts
            p += n
        else:
            p = skip_field(buf, p, end, wire)
            if p < 0:
                return BAD, BAD
    return ls, le


@njit(cache=True, inline="always")
def _count_list(buf, p, end, kind):  # noqa: ANN001, ANN202
    """(values, bytes of the values) of a list of `kind` in buf[p:end], or (BAD, 0)."""
    count, nbytes = 0, 0
    while p < end:
        tag, p = read_tag(buf, p, end)
        if p < 0:
            return BAD, 0
        field, wire = tag >> 3, tag & 7
        if field != 1:
            p = skip_field(buf, p, end, wire)
            if p < 0:
                return BAD, 0
            continue
        if kind == KIND_BYTES and wire == 2:
            n, p = read_length(buf, p, end)
            if p < 0:
                return BAD, 0
            count += 1
            nbytes += n
            p += n
        elif kind == KIND_FLOAT and wire == 2:  # packed
            n, p = read_length(buf, p, end)
            if p < 0 or n % 4 != 0:
                return BAD, 0
            count += n // 4
            p += n
        elif kind == KIND_FLOAT and wire == 5:
            if p + 4 > end:
                return BAD, 0
            count += 1
            p += 4
        elif kind == KIND_INT64 and wire == 2:  # packed
            n, p = read_length(buf, p, end)
            if p < 0:
                return BAD, 0
            stop = p + n
            while p < stop:
                _, p = read_varint(buf, p, stop)
                if p < 0:
                    return BAD, 0
                count += 1
        elif kind == KIND_INT64 and wire == 0:
            _, p = read_varint(buf, p, end)
            if p < 0:
                return BAD, 0
            count += 1
        else:
            return BAD, 0
    return count, nbytes


@njit(cache=True)
def count_values(buf, pos, ends, kinds):  # noqa: ANN001, ANN201
    """(counts, nbytes): the values of each located Feature (-1 where absent, BAD where it
    cannot be followed or is of another kind), and their bytes for bytes lists."""
    n, nf = pos.shape
    counts = np.full((n, nf), -1, np.int64)
    nbytes = np.zeros((n, nf), np.int64)
    for r in range(n):
        for f in range(nf):
            if pos[r, f] < 0:
                continue
            ls, le = _list_of(buf, pos[r, f], ends[r, f], kinds[f])
            if ls == BAD:
                counts[r, f] = BAD
            elif ls < 0:
                counts[r, f] = 0
            else:
                counts[r, f], nbytes[r, f] = _count_list(buf, ls, le, kinds[f])
    return counts, nbytes


@njit(cache=True, inline="always")
def _fill_list(buf, p, end, kind, at, byte_at, ints, floats, offsets, data):  # noqa: ANN001, ANN202
    """Write a list's values from index `at` (and bytes from `byte_at`); the next indices."""
    while p < end:
        tag, p = read_tag(buf, p, end)
        field, wire = tag >> 3, tag & 7
        if field != 1:
            p = skip_field(buf, p, end, wire)
            continue
        if kind == KIND_BYTES:
            n, p = read_length(buf, p, end)
            for j in range(n):
                data[byte_at + j] = buf[p + j]
            byte_at += n
            offsets[at + 1] = byte_at
            at += 1
            p += n
        elif kind == KIND_FLOAT:
            n = 4
            if wire == 2:
                n, p = read_length(buf, p, end)
            stop = p + n
            while p < stop:
                bits = np.uint32(0)
                for j in range(4):
                    bits |= np.uint32(buf[p + j]) << np.uint32(8 * j)
                floats[at] = bits
                at += 1
                p += 4
        else:
            stop = end
            if wire == 2:
                n, p = read_length(buf, p, end)
                stop = p + n
                while p < stop:
                    ints[at], p = read_varint(buf, p, stop)
                    at += 1
            else:
                ints[at], p = read_varint(buf, p, end)
                at += 1
    return at, byte_at


@njit(cache=True)
def fill_values(buf, pos, ends, kinds, value_at, byte_at, ints, floats, offsets, data):  # noqa: ANN001, ANN201
    """Write the values of every located Feature: int64s into `ints`, floats (as their uint32
    bits) into `floats`, bytes into `data` with their end offsets in `offsets`, record r's
    values of feature f from index value_at[r, f] (and byte byte_at[r, f])."""
    n, nf = pos.shape
    for r in range(n):
        for f in range(nf):
            if pos[r, f] < 0:
                continue
            ls, le = _list_of(buf, pos[r, f], ends[r, f], kinds[f])
            if ls >= 0:
                _fill_list(
                    buf, ls, le, kinds[f], value_at[r, f], byte_at[r, f], ints, floats, offsets,
                    data,
                )  # fmt: skip


@njit(cache=True, inline="always")
def _parse_list(buf, p, end, kind, at, byte_at, ints, floats, offsets, data):  # noqa: ANN001, ANN202
    """Write a list's values from index `at` (and bytes from `byte_at`), checking the wire
    format as it goes; the next indices, or (-1, -1) for a list that cannot be followed."""
    while p < end:
        tag, p = read_tag(buf, p, end)
        if p < 0:
            return -1, -1
        field, wire = tag >> 3, tag & 7
        if field != 1:
            p = skip_field(buf, p, end, wire)
            if p < 0:
                return -1, -1
            continue
        if kind == KIND_BYTES and wire == 2:
            n, p = read_length(buf, p, end)
            if p < 0:
                return -1, -1
            for j in range(n):
                data[byte_at + j] = buf[p + j]
            byte_at += n
            offsets[at + 1] = byte_at
            at += 1
            p += n
        elif kind == KIND_FLOAT and (wire == 2 or wire == 5):
            n = 4
            if wire == 2:
                n, p = read_length(buf, p, end)
                if p < 0 or n % 4 != 0:
                    return -1, -1
            elif p + 4 > end:
                return -1, -1
            stop = p + n
            while p < stop:
                bits = np.uint32(0)
                for j in range(4):
                    bits |= np.uint32(buf[p + j]) << np.uint32(8 * j)
                floats[at] = bits
                at += 1
                p += 4
        elif kind == KIND_INT64 and wire == 2:
            n, p = read_length(buf, p, end)
            if p < 0:
                return -1, -1
            stop = p + n
            while p < stop:
                ints[at], p = read_varint(buf, p, stop)
                if p < 0:
                    return -1, -1
                at += 1
        elif kind == KIND_INT64 and wire == 0:
            ints[at], p = read_varint(buf, p, end)
            if p < 0:
                return -1, -1
            at += 1
        else:
            return -1, -1
    return at, byte_at


@njit(cache=True)
def parse_values(buf, pos, ends, kinds, value_base, byte_base, ints, floats, offsets, data):  # noqa: ANN001, ANN201
    """count_values and fill_values in one pass: each feature's values written from its own
    region's start (value_base[f], byte_base[f]: regions sized by the caller from the Features'
    bytes, which bound the values they hold), rows one after the other. Returns the counts
    (-1 absent, BAD when a Feature cannot be followed or is of another kind) and where each
    feature's values end."""
    n, nf = pos.shape
    counts = np.full((n, nf), -1, np.int64)
    at = value_base.copy()
    byte_at = byte_base.copy()
    for r in range(n):
        for f in range(nf):
            if pos[r, f] < 0:
                continue
            ls, le = _list_of(buf, pos[r, f], ends[r, f], kinds[f])
            if ls == BAD:
                counts[r, f] = BAD
                continue
            if ls < 0:
                counts[r, f] = 0
                continue
            a, b = _parse_list(
                buf, ls, le, kinds[f], at[f], byte_at[f], ints, floats, offsets, data
            )
            if a < 0:
                counts[r, f] = BAD
                continue
            counts[r, f] = a - at[f]
            at[f], byte_at[f] = a, b
    return counts, at


@njit(cache=True)
def count_steps(buf, pos, ends):  # noqa: ANN001, ANN201
    """Steps (Features) of each located FeatureList (0 where absent, BAD where it cannot be
    followed)."""
    n, nl = pos.shape
    steps = np.zeros((n, nl), np.int64)
    for r in range(n):
        for f in range(nl):
            p, end = pos[r, f], ends[r, f]
            if p < 0:
                continue
            count = 0
            while p < end:
                tag, p = read_tag(buf, p, end)
                if p < 0:
                    count = BAD
                    break
                if tag == 0x0A:
                    size, p = read_length(buf, p, end)
                    if p < 0:
                        count = BAD
                        break
                    p += size
                    count += 1
                else:
                    p = skip_field(buf, p, end, tag & 7)
                    if p < 0:
                        count = BAD
                        break
            steps[r, f] = count
    return steps


@njit(cache=True)
def count_step_values(buf, pos, ends, kinds, step_at, total):  # noqa: ANN001, ANN201
    """(counts, nbytes, starts, stops) per step of every located FeatureList, record r's steps of
    list f from index step_at[r, f] of the flat arrays of `total` steps: each step's value count
    (BAD where it cannot be followed or is of another kind), bytes, and where its Feature lies."""
    counts = np.zeros(total, np.int64)
    nbytes = np.zeros(total, np.int64)
    fstart = np.zeros(total, np.int64)
    fstop = np.zeros(total, np.int64)
    n, nl = pos.shape
    for r in range(n):
        for f in range(nl):
            p, end = pos[r, f], ends[r, f]
            if p < 0:
                continue
            s = step_at[r, f]
            while p < end:
                tag, p = read_tag(buf, p, end)
                if tag == 0x0A:
                    size, p = read_length(buf, p, end)
                    fstart[s], fstop[s] = p, p + size
                    ls, le = _list_of(buf, p, p + size, kinds[f])
                    if ls == BAD:
                        counts[s] = BAD
                    elif ls >= 0:
                        counts[s], nbytes[s] = _count_list(buf, ls, le, kinds[f])
                    s += 1
                    p += size
                else:
                    p = skip_field(buf, p, end, tag & 7)
    return counts, nbytes, fstart, fstop


@njit(cache=True)
def fill_step_values(  # noqa: ANN201
    buf,  # noqa: ANN001
    fstart,  # noqa: ANN001
    fstop,  # noqa: ANN001
    step_kinds,  # noqa: ANN001
    value_at,  # noqa: ANN001
    byte_at,  # noqa: ANN001
    ints,  # noqa: ANN001
    floats,  # noqa: ANN001
    offsets,  # noqa: ANN001
    data,  # noqa: ANN001
):
    """Write the values of every step (its Feature at buf[fstart[s]:fstop[s]], of kind
    step_kinds[s]) from index value_at[s] (and byte byte_at[s]), as fill_values does."""
    for s in range(fstart.shape[0]):
        ls, le = _list_of(buf, fstart[s], fstop[s], step_kinds[s])
        if ls >= 0:
            _fill_list(
                buf, ls, le, step_kinds[s], value_at[s], byte_at[s], ints, floats, offsets, data
            )
