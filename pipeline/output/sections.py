"""The sections of manifest.json as typed records (the `Manifest` holds them; manifest.py):
a stored feature (what the readers restore a column from), a split's files and shards, the
split rule, the sharding, the bad-row files and a SequenceExample output's `sequence` section.
Each turns into its JSON form and back (`to_json`, `from_json`) where it has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.encode.features import FeatureSpec, nulls_specs, row_lengths_specs

__all__ = [
    "BadRowFiles",
    "SequenceSection",
    "ShardEntry",
    "Sharding",
    "SplitEntry",
    "SplitRule",
    "StoredFeature",
    "with_derived",
]


@dataclasses.dataclass(frozen=True)
class StoredFeature:
    """One manifest feature entry: the writer's FeatureSpec, how many rows were null, and for
    a list whose items held nulls, per such level K the rows that hold its null positions
    (`nulls_key(name, K)`; the entry's `inner_nulls`, left out when there are none)."""

    spec: FeatureSpec
    null_count: int = 0
    inner_nulls: tuple[tuple[int, int], ...] = ()  # (level, rows holding its positions)

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> StoredFeature:
        inner = entry.get("inner_nulls") or {}
        levels = tuple(sorted((int(k), int(v)) for k, v in inner.items()))
        return cls(FeatureSpec.from_json(entry), int(entry.get("null_count", 0)), levels)

    def to_json(self) -> dict[str, Any]:
        out = {**self.spec.to_json(), "null_count": int(self.null_count)}
        if self.inner_nulls:  # outputs without nulls inside lists keep the entry they had
            out["inner_nulls"] = {str(k): int(rows) for k, rows in self.inner_nulls}
        return out

    @property
    def null_levels(self) -> tuple[int, ...]:
        """The list levels whose items held nulls: each has its feature of null positions."""
        return tuple(k for k, rows in self.inner_nulls if rows > 0)

    def mask_keys(self, lists: bool = True) -> list[str]:
        """The keys of the masks the readers add beside the feature: `NAME__present` (a
        nullable scalar or fixed array; with `lists`, a nullable list that comes back ragged
        too) and `NAME__present_K` per list level K whose items held nulls."""
        keys = [f"{self.name}__present"] if self.has_mask or (lists and self.list_mask) else []
        return keys + [f"{self.name}__present_{k}" for k in self.null_levels]

    @property
    def list_mask(self) -> bool:
        """Whether the readers add a `__present` mask to a list that comes back ragged (a
        nullable one: a null row and an empty list read apart)."""
        return self.nullable and self.ragged

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nullable(self) -> bool:
        return self.null_count > 0

    @property
    def ragged(self) -> bool:
        """Whether it comes back as a RaggedTensor (a variable-length list or outer dim)."""
        shape = self.spec.shape
        return shape is None or any(d < 0 for d in shape)

    @property
    def has_mask(self) -> bool:
        """Whether `restore` adds a `__present` mask (a nullable scalar or fixed array)."""
        return self.nullable and not self.ragged


def with_derived(features: Sequence[StoredFeature], rows: int = 0) -> list[StoredFeature]:
    """`features` and, after each list ragged below its first level, its row-lengths features
    (int64 lists, absent exactly where the column is null), then after each list that held
    nulls its features of null positions (int64 lists, absent from the `rows` records but
    those with such nulls): every key the records hold, each with statistics of its own."""
    out = []
    for f in features:
        out.append(f)
        out += [StoredFeature(spec, f.null_count) for spec in row_lengths_specs(f.spec)]
        holding = dict(f.inner_nulls)
        out += [
            StoredFeature(spec, max(rows - holding[k], 0))
            for k, spec in zip(f.null_levels, nulls_specs(f.spec, f.null_levels), strict=True)
        ]
    return out


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard: its path relative to the output; records and bytes when the writer counted
    them (None for Beam's own TFRecord sink); its index file with `--index`
    (transforms/write/index.py)."""

    file: str
    rows: int | None
    bytes: int | None
    index: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "rows": self.rows, "bytes": self.bytes}
        if self.index is not None:  # outputs without one keep the entries they always had
            out["index"] = self.index
        return out


@dataclasses.dataclass(frozen=True)
class SplitEntry:
    rows: int
    files: tuple[str, ...]
    shards: tuple[ShardEntry, ...] = ()


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """How rows were assigned to splits: weights in order, the key column, the salt."""

    weights: Mapping[str, int]
    key: str | None = None
    salt: str = ""


@dataclasses.dataclass(frozen=True)
class Sharding:
    num_shards: int
    shard_mb: float
    estimated_bytes: int
    shuffle: Mapping[str, Any] | None = None  # {"splits": [...], "seed": n}


@dataclasses.dataclass(frozen=True)
class BadRowFiles:
    count: int = 0
    files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SequenceSection:
    """The records are tf.train.SequenceExamples: the manifest's `features` are their context,
    these their feature lists (one Feature per step); grouped by `group_by` in `order_by` order,
    or the elements of the list column `column` (`null_lists`: rows whose list was null)."""

    features: tuple[StoredFeature, ...]
    steps: int
    group_by: tuple[str, ...] = ()
    order_by: str | None = None
    column: str | None = None
    null_lists: int = 0

    def to_json(self) -> dict[str, Any]:
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        features = [f.to_json() for f in self.features]
        return {**plain, "group_by": list(self.group_by), "features": features}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SequenceSection:
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        features = tuple(StoredFeature.from_json(f) for f in data["features"])
        group_by = tuple(values.get("group_by", ()))
        return cls(**{**values, "group_by": group_by, "features": features})
