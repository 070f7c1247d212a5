"""A compiled check of many records at once against the manifest's features, so `verify` runs no
Python per record when the records are as the writer makes them.

`scan_records` walks each serialized tf.train.Example (Example.features = 1: Features;
Features.feature = 1: map entries of key = 1 and Feature = 2; Feature: bytes_list = 1,
float_list = 2, int64_list = 3, each holding its values in field 1) and says per record whether
it is *plainly valid*: one `features` field; every entry a known key, once, with a Feature of
the manifest's kind holding its values as the writer writes them (bytes one by one; floats and
int64s packed, or no value); the number of values one the parse accepts (a fixed-length
feature's exact count, a ragged feature's allowed lengths) and every float64_bytes value of its
length; every non-nullable fixed-length feature present. It also gives which features each
record holds. The rules are narrower than TensorFlow's parse: a record they accept, the parse
and the other checks accept too (so it needs neither), and a record they do not accept is left
to the parse and the exact checks (`records.RecordChecker.check`), which name its fault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from numba import njit

from pipeline.output.manifest import StoredFeature
from transforms.encode.features import FLOAT64_BYTES, NULL_POSITIONS
from transforms.encode.kernel.locate import read_varint

__all__ = ["FeatureTable", "feature_table", "scan_records"]

_KINDS = {"bytes": 1, "float": 2, "int64": 3}  # the Feature field that holds each kind
_ANY, _IN, _MULTIPLE = 0, 1, 2  # how many values a record may hold: any, 0 or k, a multiple of k
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True)
def _fnv(buf, start, end):  # noqa: ANN001, ANN202
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@dataclasses.dataclass(frozen=True)
class FeatureTable:
    """The features as the scan needs them: names (bytes, by offsets) in a hash table, and per
    feature its kind, its count rule (fixed count or -1; ragged rule and k) and its float64_bytes
    rule (0 none, 1 exactly, 2 a multiple of `value_bytes`)."""

    names: np.ndarray
    name_offsets: np.ndarray
    slots: np.ndarray  # hash table: feature index or -1
    kinds: np.ndarray
    fixed: np.ndarray
    rule: np.ndarray
    rule_k: np.ndarray
    bytes_rule: np.ndarray
    value_bytes: np.ndarray


def feature_table(features: Sequence[StoredFeature]) -> FeatureTable:
    """The scan's view of `features` (the rules of `tf.io.parse_example` with the reader's spec,
    and of records.RecordChecker's length checks)."""
    encoded = [f.name.encode("utf-8") for f in features]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(n) for n in encoded], out=offsets[1:])
    names = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
    size = 1 << max(4, (2 * len(encoded)).bit_length())
    slots = np.full(size, -1, np.int64)
    for j in range(len(encoded)):
        h = int(_fnv(names, offsets[j], offsets[j + 1])) & (size - 1)
        while slots[h] >= 0:
            h = (h + 1) & (size - 1)
        slots[h] = j
    m = len(features)
    kinds, fixed = np.zeros(m, np.int64), np.full(m, -1, np.int64)
    rule, rule_k = np.zeros(m, np.int64), np.zeros(m, np.int64)
    bytes_rule, value_bytes = np.zeros(m, np.int64), np.zeros(m, np.int64)
    for j, f in enumerate(features):
        spec = f.spec
        shape = spec.shape
        kinds[j] = _KINDS["bytes"] if spec.encoding == FLOAT64_BYTES else _KINDS[spec.kind]
        if spec.encoding == FLOAT64_BYTES:
            if not f.nullable:
                fixed[j] = 1
            else:
                rule[j], rule_k[j] = _IN, 1
            if shape is None:
                bytes_rule[j], value_bytes[j] = 2, 8
            elif f.ragged:
                bytes_rule[j], value_bytes[j] = 2, 8 * int(np.prod(shape[1:], dtype=np.int64))
            else:
                bytes_rule[j], value_bytes[j] = 1, 8 * int(np.prod(shape, dtype=np.int64))
        elif f.nullable or f.ragged:
            if shape is not None and f.ragged:
                rule[j], rule_k[j] = _MULTIPLE, int(np.prod(shape[1:], dtype=np.int64))
            elif shape is not None:
                rule[j], rule_k[j] = _IN, int(np.prod(shape, dtype=np.int64))
        else:
            fixed[j] = 1 if shape == () else int(np.prod(shape, dtype=np.int64))
    bad = (rule == _MULTIPLE) & (rule_k <= 0) | (bytes_rule > 0) & (value_bytes <= 0)
    fixed[fixed == 0] = -2  # an empty fixed shape: left to the parse
    rule[bad] = -1  # a rule with nothing to divide by: left to the checks
    nested = [j for j, f in enumerate(features) if f.spec.partition_levels]
    rule[nested] = -1  # values partitioned by row lengths: the parse checks that they agree
    nulls = [j for j, f in enumerate(features) if f.spec.source_type == NULL_POSITIONS]
    rule[nulls] = -1  # null positions: the parse checks them against the row's items
    return FeatureTable(names, offsets, slots, kinds, fixed, rule, rule_k, bytes_rule, value_bytes)


@njit(cache=True, inline="always")
def _small(buf, p, end):  # noqa: ANN001, ANN202
    """A tag or a length: one byte below 0x80 read at once, else the general varint walk."""
    if p < end and buf[p] < 0x80:
        return np.int64(buf[p]), p + 1
    return read_varint(buf, p, end)


@njit(cache=True, inline="always")
def _same_key(buf, ks, ke, names, offsets, j):  # noqa: ANN001, ANN202
    s, e = offsets[j], offsets[j + 1]
    if e - s != ke - ks:
        return False
    for i in range(e - s):
        if names[s + i] != buf[ks + i]:
            return False
    return True


@njit(cache=True)
def _lookup(buf, ks, ke, names, offsets, slots):  # noqa: ANN001, ANN202
    mask = slots.shape[0] - 1
    h = np.int64(_fnv(buf, ks, ke) & np.uint64(mask))
    while True:
        j = slots[h]
        if j < 0:
            return -1
        if _same_key(buf, ks, ke, names, offsets, j):
            return j
        h = (h + 1) & mask


@njit(cache=True)
def _values(buf, p, end, kind, bytes_rule, value_bytes):  # noqa: ANN001, ANN202
    """The number of values in a value list buf[p:end], or -1 when it is not plain."""
    count = 0
    packed = False
    while p < end:
        tag, p = _small(buf, p, end)
        if p < 0 or tag != 0x0A:
            return -1
        n, p = _small(buf, p, end)
        if p < 0 or n < 0 or n > end - p:
            return -1
        stop = p + n
        if kind == 1:
            if bytes_rule == 1 and n != value_bytes:
                return -1
            if bytes_rule == 2 and n % value_bytes != 0:
                return -1
            count += 1
        elif packed:  # one packed field only
            return -1
        elif kind == 2:
            if n % 4 != 0:
                return -1
            count += n // 4
            packed = True
        else:  # varints: the bytes below 0x80 end one each; none longer than 10 bytes
            if n and buf[stop - 1] >= 0x80:
                return -1
            run = longest = 0
            for q in range(p, stop):
                more = buf[q] >> 7
                count += 1 - more
                run = (run + 1) * more
                longest = max(longest, run)
            if longest > 9:
                return -1
            packed = True
        p = stop
    return count


@njit(cache=True)
def scan_records(buf, starts, ends, names, offsets, slots, kinds, fixed, rule, rule_k, brule, vb):  # noqa: ANN001, ANN201
    """(plain, present): per record whether it is plainly valid, and which features it holds
    (meaningful where plain)."""
    n, m = starts.shape[0], kinds.shape[0]
    plain = np.ones(n, np.bool_)
    present = np.zeros((n, m), np.bool_)
    hint = np.full(m + 1, -1, np.int64)  # the feature at each entry position of the last record
    for i in range(n):
        p, end = starts[i], ends[i]
        ok, seen = True, False
        while ok and p < end:
            tag, p = _small(buf, p, end)
            if p < 0 or tag != 0x0A or seen:
                ok = False
                break
            seen = True
            size, p = _small(buf, p, end)
            if p < 0 or size < 0 or size > end - p:
                ok = False
                break
            stop = p + size
            pos = 0
            while p < stop:
                tag, p = _small(buf, p, stop)
                if p < 0 or tag != 0x0A:
                    ok = False
                    break
                size, p = _small(buf, p, stop)
                if p < 0 or size < 0 or size > stop - p:
                    ok = False
                    break
                entry_end = p + size
                tag, p = _small(buf, p, entry_end)  # the key
                if p < 0 or tag != 0x0A:
                    ok = False
                    break
                size, p = _small(buf, p, entry_end)
                if p < 0 or size < 0 or size > entry_end - p:
                    ok = False
                    break
                j = hint[pos]
                if j < 0 or not _same_key(buf, p, p + size, names, offsets, j):
                    j = _lookup(buf, p, p + size, names, offsets, slots)
                    hint[pos] = j
                pos = min(pos + 1, m)
                p += size
                if j < 0 or present[i, j]:
                    ok = False
                    break
                present[i, j] = True
                tag, p = _small(buf, p, entry_end)  # the Feature
                if p < 0 or tag != 0x12:
                    ok = False
                    break
                size, p = _small(buf, p, entry_end)
                if p < 0 or p + size != entry_end:
                    ok = False
                    break
                tag, p = _small(buf, p, entry_end)  # its one value list
                if p < 0 or tag != ((kinds[j] << 3) | 2):
                    ok = False
                    break
                size, p = _small(buf, p, entry_end)
                if p < 0 or p + size != entry_end:
                    ok = False
                    break
                count = _values(buf, p, entry_end, kinds[j], brule[j], vb[j])
                p = entry_end
                if count < 0 or fixed[j] == -2 or rule[j] < 0:
                    ok = False
                elif fixed[j] >= 0:
                    ok = count == fixed[j]
                elif rule[j] == _IN:
                    ok = count == 0 or count == rule_k[j]
                elif rule[j] == _MULTIPLE:
                    ok = count % rule_k[j] == 0
                if not ok:
                    break
        if ok:
            for j in range(m):
                if fixed[j] != -1 and not present[i, j]:
                    ok = False
                    break
        plain[i] = ok
    return plain, present
