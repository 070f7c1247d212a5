"""Which features each serialized tf.train.Example holds, for a batch of records at once.

A small compiled walk of the protobuf wire format collects the key of every map entry
(Example.features = 1: Features; Features.feature = 1: map<string, Feature> entries; entry key =
1), skipping every other field by its wire type. It decodes no value (the parse with the
manifest's spec checks those). A record the walk cannot follow (a group, field number 0 or over
2**29 - 1, a negative length or one past the end) is decoded with protobuf instead, so the
result is protobuf's: several `features` fields merge, a key given twice counts once. Keys
are matched to the feature names by their bytes (a 64-bit hash groups them, then each key of
a group is compared byte for byte). The wire primitives (varint, tag, length, skip) are the
encoder kernel's (`transforms/encode/kernel/locate.py`): one owner of the wire format.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from google.protobuf.message import DecodeError
from numba import njit

from pipeline.verify.example_pb import Example
from transforms.encode.kernel.locate import read_length, read_tag, skip_field
from transforms.hashing import hash_ranges

__all__ = ["entry_keys", "feature_presence"]


@njit(cache=True)
def _entry_key(buf, p, end):  # noqa: ANN001, ANN202
    """(key start, key end) of one map entry in buf[p:end] (empty when it has none), or -1s."""
    ks = ke = p
    while p < end:
        tag, p = read_tag(buf, p, end)
        if p < 0:
            return -1, -1
        if tag == 0x0A:
            n, p = read_length(buf, p, end)
            if p < 0 or p + n > end:
                return -1, -1
            ks, ke, p = p, p + n, p + n
        else:
            p = skip_field(buf, p, end, tag & 7)
            if p < 0:
                return -1, -1
    return ks, ke


@njit(cache=True)
def entry_keys(buf, offsets):  # noqa: ANN001, ANN201
    """Every map entry key of each record buf[offsets[i]:offsets[i+1]]: (record, key start,
    key end) arrays, and per record whether the walk could follow it."""
    n = offsets.shape[0] - 1
    cap = buf.shape[0] // 4 + 1  # an entry takes at least 4 bytes
    rec = np.empty(cap, np.int64)
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    ok = np.ones(n, np.bool_)
    k = 0
    for i in range(n):
        p, end, first = offsets[i], offsets[i + 1], k
        while p < end and ok[i]:
            tag, p = read_tag(buf, p, end)
            if p < 0:
                ok[i] = False
            elif tag == 0x0A:  # features
                size, p = read_length(buf, p, end)
                if p < 0 or p + size > end:
                    ok[i] = False
                    break
                stop = p + size
                while p < stop and ok[i]:
                    tag, p = read_tag(buf, p, stop)
                    if p < 0:
                        ok[i] = False
                    elif tag == 0x0A:  # one map entry
                        size, p = read_length(buf, p, stop)
                        if p < 0 or p + size > stop:
                            ok[i] = False
                            break
                        ks, ke = _entry_key(buf, p, p + size)
                        if ks < 0:
                            ok[i] = False
                            break
                        rec[k], starts[k], ends[k] = i, ks, ke
                        k += 1
                        p += size
                    else:
                        p = skip_field(buf, p, stop, tag & 7)
                        ok[i] = p >= 0
            else:
                p = skip_field(buf, p, end, tag & 7)
                ok[i] = p >= 0
        if not ok[i]:
            k = first
    return rec[:k], starts[:k], ends[:k], ok


def _key_bytes(buf: np.ndarray, start: int, end: int) -> bytes:
    return buf[start:end].tobytes()


def feature_presence(
    records: Sequence[bytes], names: Sequence[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(present, unknown): present[i, j] is whether record i holds the feature `names[j]`;
    unknown maps each other key found to the records holding it."""
    n = len(records)
    present = np.zeros((n, len(names)), np.bool_)
    unknown: dict[str, list[int]] = {}
    if n == 0:
        return present, {}
    column = {name.encode("utf-8"): j for j, name in enumerate(names)}
    buf = np.frombuffer(b"".join(records), np.uint8)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(r) for r in records], out=offsets[1:])
    rec, starts, ends, ok = entry_keys(buf, offsets)
    hashes = hash_ranges(starts, ends, buf, "")
    order = np.argsort(hashes, kind="stable")
    bounds = np.flatnonzero(np.diff(hashes[order])) + 1
    for group in np.split(order, bounds):
        while group.size:  # keys of one hash: those equal to the first, then the rest
            s, e = int(starts[group[0]]), int(ends[group[0]])
            key = _key_bytes(buf, s, e)
            same = ends[group] - starts[group] == e - s
            cand = group[same]
            if e > s:
                grid = buf[starts[cand][:, None] + np.arange(e - s)]
                same[np.flatnonzero(same)] = (grid == buf[s:e]).all(axis=1)
            hit, group = group[same], group[~same]
            j = column.get(key)
            if j is not None:
                present[rec[hit], j] = True
            else:
                unknown.setdefault(key.decode("utf-8", "backslashreplace"), []).extend(rec[hit])
    for i in np.flatnonzero(~ok):  # what the walk could not follow: protobuf decides
        try:
            keys = Example.FromString(records[i]).features.feature.keys()
        except DecodeError:
            continue  # not an Example at all: the parse reports it
        for key in keys:
            j = column.get(key.encode("utf-8"))
            if j is not None:
                present[i, j] = True
            else:
                unknown.setdefault(key, []).append(int(i))
    return present, {k: np.unique(np.asarray(v, np.int64)) for k, v in unknown.items()}
