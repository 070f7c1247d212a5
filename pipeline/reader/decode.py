"""Serialized records -> each stored feature's raw values, a batch at a time, without
TensorFlow: the compiled parse of transforms/encode/kernel/parse.py, then one numpy array per
feature.

`Keys` are the wanted feature keys, hashed once. `decode_records` gives, per feature, a `Raw`:
its values as stored (int64, float32, or bytes as a pyarrow-style (offsets, data) pair), and
per record the number of values, -1 where the record does not hold the feature. For the feature
lists of SequenceExamples (`decode_steps`), the same per step, and the steps per record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from transforms.encode.features import BYTES, FLOAT, INT64
from transforms.encode.kernel import parse
from transforms.hashing import hash_ranges

__all__ = ["Keys", "Raw", "RawSteps", "RecordError", "decode_records", "decode_steps"]

_KINDS = {BYTES: parse.KIND_BYTES, FLOAT: parse.KIND_FLOAT, INT64: parse.KIND_INT64}


class RecordError(ValueError):
    """A record that does not parse, or holds a feature of another kind than the manifest's."""


@dataclasses.dataclass(frozen=True)
class Keys:
    """Feature keys to find, with their kinds: hashed, sorted, as the kernel looks them up."""

    names: tuple[str, ...]
    kinds: np.ndarray  # parse.KIND_* per key
    hashes: np.ndarray  # uint64, sorted
    ids: np.ndarray  # the key of each sorted hash
    data: np.ndarray  # the keys' UTF-8 bytes, one after the other
    offsets: np.ndarray

    @classmethod
    def of(cls, names: Sequence[str], kinds: Sequence[str]) -> Keys:
        encoded = [n.encode("utf-8") for n in names]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        data = np.frombuffer(b"".join(encoded), np.uint8) if encoded else np.zeros(0, np.uint8)
        hashes = hash_ranges(offsets[:-1], offsets[1:], data, "")
        order = np.argsort(hashes, kind="stable")
        return cls(
            tuple(names),
            np.array([_KINDS[k] for k in kinds], np.int64),
            hashes[order],
            order.astype(np.int64),
            data,
            offsets,
        )


@dataclasses.dataclass(frozen=True)
class Raw:
    """One feature's values of a batch of records: `counts[i]` values of record i (-1: the
    record does not hold it), one after the other in `values` (int64 or float32), or for bytes
    in `data` with `offsets` (value j is data[offsets[j]:offsets[j + 1]])."""

    counts: np.ndarray
    values: np.ndarray | None = None
    offsets: np.ndarray | None = None
    data: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class RawSteps:
    """One feature list's steps of a batch of records: `steps[i]` steps of record i, and the
    steps' values as a `Raw` (one entry per step, -1 for a step that holds no list)."""

    steps: np.ndarray
    raw: Raw


_EMPTY = Keys.of([], [])


def _fill(
    buf: np.ndarray,
    counts: np.ndarray,
    nbytes: np.ndarray,
    kinds: np.ndarray,
    fill: object,
) -> list[Raw]:
    """Allocate the value arrays of every column of `counts` and run `fill` over them."""
    present = np.maximum(counts, 0)
    totals = present.sum(axis=0)
    value_at = np.zeros_like(counts)
    byte_at = np.zeros_like(counts)
    ints = np.empty(int(totals[kinds == parse.KIND_INT64].sum()), np.int64)
    floats = np.empty(int(totals[kinds == parse.KIND_FLOAT].sum()), np.uint32)
    n_bytes = int(totals[kinds == parse.KIND_BYTES].sum())
    offsets = np.zeros(n_bytes + 1, np.int64)
    data = np.empty(int(nbytes[:, kinds == parse.KIND_BYTES].sum()), np.uint8)
    bases = {parse.KIND_INT64: 0, parse.KIND_FLOAT: 0, parse.KIND_BYTES: 0}
    byte_base = 0
    spans = []
    for f in range(counts.shape[1]):
        kind = int(kinds[f])
        base = bases[kind]
        at = base + np.concatenate(([0], np.cumsum(present[:, f])[:-1]))
        value_at[:, f] = at
        if kind == parse.KIND_BYTES:
            byte_at[:, f] = byte_base + np.concatenate(([0], np.cumsum(nbytes[:, f])[:-1]))
            byte_base += int(nbytes[:, f].sum())
        spans.append((kind, base, base + int(totals[f])))
        bases[kind] = base + int(totals[f])
    fill(value_at, byte_at, ints, floats, offsets, data)
    out = []
    for f, (kind, a, b) in enumerate(spans):
        if kind == parse.KIND_INT64:
            out.append(Raw(counts[:, f], ints[a:b]))
        elif kind == parse.KIND_FLOAT:
            out.append(Raw(counts[:, f], floats[a:b].view(np.float32)))
        else:
            out.append(Raw(counts[:, f], None, offsets[a : b + 1], data))
    return out


def _check(counts: np.ndarray, names: Sequence[str], where: str) -> None:
    bad = np.argwhere(counts == parse.BAD)
    if bad.size:
        r, f = (int(x) for x in bad[0])
        raise RecordError(
            f"{where}: record {r} of the batch: feature {names[f]!r} does not parse as the "
            "manifest's kind (a record of another writer, or a corrupt one)"
        )


def _located(
    buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, keys: Keys, lists: Keys, where: str
) -> tuple[np.ndarray, ...]:
    fpos, fend, lpos, lend, ok = parse.locate(
        buf, starts, stops, keys.hashes, keys.ids, keys.data, keys.offsets, len(keys.names),
        lists.hashes, lists.ids, lists.data, lists.offsets, len(lists.names),
    )  # fmt: skip
    if not ok.all():
        r = int(np.flatnonzero(~ok)[0])
        raise RecordError(f"{where}: record {r} of the batch is not a tf.train.Example it can read")
    return fpos, fend, lpos, lend


def _parse(
    buf: np.ndarray, fpos: np.ndarray, fend: np.ndarray, keys: Keys, where: str
) -> list[Raw]:
    """Every located Feature's values in one pass: each feature gets a region of the kind's
    array as large as its Features' bytes (a bound on the values they hold), filled from its
    start, then cut to what was written."""
    kinds = keys.kinds
    bounds = np.where(fpos >= 0, fend - fpos, 0).sum(axis=0).astype(np.int64)
    value_base = np.zeros(len(kinds), np.int64)
    byte_base = np.zeros(len(kinds), np.int64)
    sizes = {}
    for kind in (parse.KIND_INT64, parse.KIND_FLOAT, parse.KIND_BYTES):
        mine = kinds == kind
        value_base[mine] = np.concatenate(([0], np.cumsum(bounds[mine])[:-1]))
        sizes[kind] = int(bounds[mine].sum())
    byte_base[:] = value_base
    ints = np.empty(sizes[parse.KIND_INT64], np.int64)
    floats = np.empty(sizes[parse.KIND_FLOAT], np.uint32)
    offsets = np.empty(sizes[parse.KIND_BYTES] + 1, np.int64)
    data = np.empty(sizes[parse.KIND_BYTES], np.uint8)
    is_bytes = kinds == parse.KIND_BYTES
    offsets[value_base[is_bytes]] = byte_base[is_bytes]  # where each region's first value starts
    counts, ends = parse.parse_values(
        buf, fpos, fend, kinds, value_base, byte_base, ints, floats, offsets, data
    )
    _check(counts, keys.names, where)
    out = []
    for f, kind in enumerate(kinds.tolist()):
        a, b = int(value_base[f]), int(ends[f])
        if kind == parse.KIND_INT64:
            out.append(Raw(counts[:, f], ints[a:b]))
        elif kind == parse.KIND_FLOAT:
            out.append(Raw(counts[:, f], floats[a:b].view(np.float32)))
        else:
            out.append(Raw(counts[:, f], None, offsets[a : b + 1], data))
    return out


def decode_records(
    buf: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    keys: Keys,
    lists: Keys = _EMPTY,
    where: str = "",
) -> tuple[list[Raw], list[RawSteps]]:
    """Each wanted feature's `Raw` (and, for SequenceExamples, each wanted feature list's
    `RawSteps`) of the records buf[starts[i]:stops[i]]. RecordError names `where` and the
    record when one does not parse."""
    fpos, fend, lpos, lend = _located(buf, starts, stops, keys, lists, where)
    raws = _parse(buf, fpos, fend, keys, where) if keys.names else []
    steps = decode_steps(buf, lpos, lend, lists, where) if lists.names else []
    return raws, steps


def decode_steps(
    buf: np.ndarray, lpos: np.ndarray, lend: np.ndarray, lists: Keys, where: str
) -> list[RawSteps]:
    """The feature lists located at lpos/lend: per list, its steps per record and their values."""
    steps = parse.count_steps(buf, lpos, lend)
    if (steps == parse.BAD).any():
        r, f = (int(x) for x in np.argwhere(steps == parse.BAD)[0])
        raise RecordError(f"{where}: record {r}: feature list {lists.names[f]!r} does not parse")
    per_list = steps.sum(axis=0)
    bases = np.concatenate(([0], np.cumsum(per_list)))
    step_at = np.zeros_like(steps)
    for f in range(steps.shape[1]):
        step_at[:, f] = bases[f] + np.concatenate(([0], np.cumsum(steps[:, f])[:-1]))
    total = int(bases[-1])
    counts, nbytes, fstart, fstop = parse.count_step_values(
        buf, lpos, lend, lists.kinds, step_at, total
    )
    step_kinds = np.repeat(lists.kinds, per_list)
    out = []
    for f in range(steps.shape[1]):
        a, b = int(bases[f]), int(bases[f + 1])
        c = counts[a:b].reshape(-1, 1)
        _check(c, [lists.names[f]], where)
        kinds = lists.kinds[f : f + 1]

        def fill(value_at, byte_at, ints, floats, offsets, data, a=a, b=b) -> None:  # noqa: ANN001
            parse.fill_step_values(
                buf, fstart[a:b], fstop[a:b], step_kinds[a:b], value_at[:, 0], byte_at[:, 0],
                ints, floats, offsets, data,
            )  # fmt: skip

        (raw,) = _fill(buf, c, nbytes[a:b].reshape(-1, 1), kinds, fill)
        flat = Raw(raw.counts.reshape(-1), raw.values, raw.offsets, raw.data)
        out.append(RawSteps(steps[:, f], flat))
    return out
