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

1. `locate`: for each record, where the Feature (or FeatureList) of each wanted key lies; keys
   are matched by the project's 64-bit hash, then byte for byte;
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

from transforms.hashing import FNV_OFFSET, hash_range

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

KIND_BYTES, KIND_FLOAT, KIND_INT64 = 1, 2, 3  # Feature's fields: bytes_list, float_list, int64_list
BAD = -2  # a count that marks a value the parse could not follow


@njit(cache=True, inline="always")
def read_varint(buf, p, end):  # noqa: ANN001, ANN201
    """(value, position after it), or (0, -1) when it runs past `end` or over 64 bits."""
    value, shift = np.int64(0), 0
    while p < end:
        b = buf[p]
        p += 1
        value |= np.int64(b & 0x7F) << shift
        if b < 0x80:
            return value, p
        shift += 7
        if shift > 63:
            return np.int64(0), -1
    return np.int64(0), -1


@njit(cache=True, inline="always")
def read_tag(buf, p, end):  # noqa: ANN001, ANN201
    """A field's tag: (tag, position after it), or (0, -1) for one protobuf rejects: field
    number 0 or over protobuf's largest (2**29 - 1)."""
    tag, p = read_varint(buf, p, end)
    if p < 0 or tag >> 3 == 0 or tag < 0 or tag > 0xFFFFFFFF:
        return np.int64(0), -1
    return tag, p


@njit(cache=True, inline="always")
def read_length(buf, p, end):  # noqa: ANN001, ANN201
    """A length-delimited field's length: (length, position after it), or (0, -1) when it is
    not there, negative (over 63 bits) or runs past `end`."""
    n, p = read_varint(buf, p, end)
    if p < 0 or n < 0 or p + n > end:
        return np.int64(0), -1
    return n, p


@njit(cache=True, inline="always")
def skip_field(buf, p, end, wire):  # noqa: ANN001, ANN201
    """The position after a field's value of wire type `wire`, or -1."""
    if wire == 0:
        p = read_varint(buf, p, end)[1]
    elif wire == 1:
        p += 8
    elif wire == 2:
        n, p = read_length(buf, p, end)
        if p < 0:
            return -1
        p += n
    elif wire == 5:
        p += 4
    else:  # groups (3, 4) and the unused types
        return -1
    return p if 0 <= p <= end else -1


@njit(cache=True, inline="always")
def _key_id(buf, ks, ke, key_hashes, key_ids, keybuf, key_offsets):  # noqa: ANN001, ANN202
    """The wanted key buf[ks:ke] is (an index into the caller's keys), or -1."""
    h = hash_range(buf, ks, ke, FNV_OFFSET)
    lo, hi = 0, key_hashes.shape[0]
    while lo < hi:  # the first hash >= h
        mid = (lo + hi) // 2
        if key_hashes[mid] < h:
            lo = mid + 1
        else:
            hi = mid
    while lo < key_hashes.shape[0] and key_hashes[lo] == h:
        k = key_ids[lo]
        a, b = key_offsets[k], key_offsets[k + 1]
        if b - a == ke - ks:
            same = True
            for j in range(b - a):
                if keybuf[a + j] != buf[ks + j]:
                    same = False
                    break
            if same:
                return k
        lo += 1
    return -1


@njit(cache=True, inline="always")
def _same_key(buf, ks, ke, keybuf, key_offsets, k):  # noqa: ANN001, ANN202
    a, b = key_offsets[k], key_offsets[k + 1]
    if b - a != ke - ks:
        return False
    for j in range(b - a):
        if keybuf[a + j] != buf[ks + j]:
            return False
    return True


@njit(cache=True)
def _map_entries(buf, p, end, key_hashes, key_ids, keybuf, key_offsets, pos, ends, r, seen):  # noqa: ANN001, ANN202
    """Walk the map entries of a Features or FeatureLists message buf[p:end], noting where the
    value of each wanted key lies in pos[r, k], ends[r, k]. False when it cannot be followed.
    `seen[e]`: the key the e-th entry of the last record was (a writer writes its keys in one
    order: that key is tried first, byte for byte, before the hash)."""
    e = 0
    while p < end:
        tag, p = read_tag(buf, p, end)
        if p < 0:
            return False
        if tag != 0x0A:  # not a map entry
            p = skip_field(buf, p, end, tag & 7)
            if p < 0:
                return False
            continue
        size, p = read_length(buf, p, end)
        if p < 0:
            return False
        q, stop = p, p + size
        ks = ke = vs = ve = -1
        while q < stop:
            t, q = read_tag(buf, q, stop)
            if q < 0:
                return False
            if t == 0x0A or t == 0x12:
                n, q = read_length(buf, q, stop)
                if q < 0:
                    return False
                if t == 0x0A:
                    ks, ke = q, q + n
                else:
                    vs, ve = q, q + n
                q += n
            else:
                q = skip_field(buf, q, stop, t & 7)
                if q < 0:
                    return False
        if ks < 0:
            ks = ke = p  # an empty key
        k = -1
        if (
            e < seen.shape[0]
            and seen[e] >= 0
            and _same_key(buf, ks, ke, keybuf, key_offsets, seen[e])
        ):
            k = seen[e]
        else:
            k = _key_id(buf, ks, ke, key_hashes, key_ids, keybuf, key_offsets)
            if e < seen.shape[0]:
                seen[e] = k
        if k >= 0:
            if vs < 0:  # an entry without a value: an empty Feature / FeatureList
                vs = ve = stop
            pos[r, k], ends[r, k] = vs, ve
        p = stop
        e += 1
    return True


@njit(cache=True)
def locate(  # noqa: ANN201
    buf,  # noqa: ANN001
    starts,  # noqa: ANN001
    stops,  # noqa: ANN001
    f_hashes,  # noqa: ANN001
    f_ids,  # noqa: ANN001
    f_keys,  # noqa: ANN001
    f_offsets,  # noqa: ANN001
    nf,  # noqa: ANN001
    l_hashes,  # noqa: ANN001
    l_ids,  # noqa: ANN001
    l_keys,  # noqa: ANN001
    l_offsets,  # noqa: ANN001
    nl,  # noqa: ANN001
):
    """For records buf[starts[i]:stops[i]]: where the Feature of each of the `nf` wanted
    feature keys lies (field 1: Example.features, SequenceExample.context) and the FeatureList
    of each of the `nl` wanted list keys (field 2: SequenceExample.feature_lists), as
    (pos, end) matrices with -1 where the key is absent; and per record whether it parsed."""
    n = starts.shape[0]
    fpos = np.full((n, max(nf, 1)), -1, np.int64)
    fend = np.full((n, max(nf, 1)), -1, np.int64)
    lpos = np.full((n, max(nl, 1)), -1, np.int64)
    lend = np.full((n, max(nl, 1)), -1, np.int64)
    ok = np.ones(n, np.bool_)
    fseen = np.full(nf + 16, -1, np.int64)
    lseen = np.full(nl + 16, -1, np.int64)
    for r in range(n):
        p, end = starts[r], stops[r]
        while p < end:
            tag, p = read_tag(buf, p, end)
            if p < 0:
                ok[r] = False
                break
            if tag == 0x0A or (tag == 0x12 and nl > 0):
                size, p = read_length(buf, p, end)
                if p < 0:
                    ok[r] = False
                    break
                if tag == 0x0A:
                    good = _map_entries(
                        buf, p, p + size, f_hashes, f_ids, f_keys, f_offsets, fpos, fend, r, fseen
                    )
                else:
                    good = _map_entries(
                        buf, p, p + size, l_hashes, l_ids, l_keys, l_offsets, lpos, lend, r, lseen
                    )
                if not good:
                    ok[r] = False
                    break
                p += size
            else:
                p = skip_field(buf, p, end, tag & 7)
                if p < 0:
                    ok[r] = False
                    break
    return fpos[:, :nf], fend[:, :nf], lpos[:, :nl], lend[:, :nl], ok


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
