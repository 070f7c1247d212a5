"""Where each wanted key's Feature (or FeatureList) lies in each record of a batch: the first
pass of the compiled parse (parse.py), and the wire-format primitives it and the later passes
read with (varints, tags, lengths, a field skipped by its wire type).

Keys are matched by the project's 64-bit hash, then byte for byte; of a key given twice the
last one counts, as protobuf's parse does. A record the parse cannot follow is marked (`BAD`,
`ok` False), not guessed at.
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
    "locate",
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
