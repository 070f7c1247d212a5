"""Pairing the source rows whose record is missing with the records no source row gives, to say
which columns differ and how: by the split key when the job has one, else by the number of
equal features (only when both sides are small: the pairing compares every pair)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from pipeline.verify.example_pb import Example
from transforms.encode.features import FeatureSpec

__all__ = ["ABSENT", "decode_record", "differences", "pair"]

ABSENT = "(absent)"  # how a feature the record does not hold is shown (a null, or missing)
_MAX_SHOWN = 8  # values of a list shown before "..."


def _text(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def decode_record(data: bytes, specs: Mapping[str, FeatureSpec]) -> dict[str, Any] | None:
    """A record's features as readable values (one value for a scalar, a list otherwise;
    keep_float64 bytes as the float64s they hold); None when it is not an Example."""
    try:
        example = Example.FromString(data)
    except DecodeError:
        return None
    out: dict[str, Any] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = [] if kind is None else list(getattr(feature, kind).value)
        spec = specs.get(name)
        if spec is not None and spec.encoding == "float64_bytes":
            raw = b"".join(values)
            values = list(struct.unpack(f"<{len(raw) // 8}d", raw[: len(raw) // 8 * 8]))
        elif kind == "bytes_list":
            values = [_text(v) for v in values]
        elif kind == "float_list":  # float32s, shown by their shortest text (2.56, not 2.5599...)
            values = [float(str(np.float32(v))) for v in values]
        if spec is not None and spec.shape == () and len(values) == 1:
            out[name] = values[0]
        elif len(values) > _MAX_SHOWN:
            out[name] = [*values[:_MAX_SHOWN], f"... {len(values)} values"]
        else:
            out[name] = values
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b or repr(a) == repr(b)  # repr: NaN equals NaN


def differences(expected: Mapping[str, Any], found: Mapping[str, Any]) -> dict[str, dict]:
    """column -> {"source": value, "record": value} for every feature whose values differ."""
    out = {}
    for name in sorted(set(expected) | set(found)):
        a, b = expected.get(name, ABSENT), found.get(name, ABSENT)
        if not _same(a, b):
            out[name] = {"source": a, "record": b}
    return out


def _score(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    return sum(1 for name, v in a.items() if name in b and _same(b[name], v))


def pair(
    expected: Sequence[Mapping[str, Any]],
    found: Sequence[Mapping[str, Any]],
    key: str | None,
    limit: int = 200,
) -> list[tuple[int, int]]:
    """(index into expected, index into found) pairs, each side used once.

    With a `key` feature, rows and records with the same key value pair (when the value is
    unique on both sides). The rest pair greedily by the most equal features, at least half of
    the row's, when both sides have at most `limit` entries.
    """
    pairs: list[tuple[int, int]] = []
    used_e: set[int] = set()
    used_f: set[int] = set()
    if key is not None:
        by_key: dict[Any, list[int]] = {}
        for j, rec in enumerate(found):
            if key in rec:
                by_key.setdefault(repr(rec[key]), []).append(j)
        wanted: dict[Any, list[int]] = {}
        for i, row in enumerate(expected):
            if key in row:
                wanted.setdefault(repr(row[key]), []).append(i)
        for value, rows in wanted.items():
            records = by_key.get(value, [])
            if len(rows) == 1 and len(records) == 1:
                pairs.append((rows[0], records[0]))
                used_e.add(rows[0])
                used_f.add(records[0])
    rest_e = [i for i in range(len(expected)) if i not in used_e]
    rest_f = [j for j in range(len(found)) if j not in used_f]
    if not rest_e or not rest_f or len(rest_e) > limit or len(rest_f) > limit:
        return pairs
    scored = sorted(
        ((_score(expected[i], found[j]), i, j) for i in rest_e for j in rest_f),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    for score, i, j in scored:
        if i in used_e or j in used_f or 2 * score < len(expected[i]) or score == 0:
            continue
        pairs.append((i, j))
        used_e.add(i)
        used_f.add(j)
    return sorted(pairs)
