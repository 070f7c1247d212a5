"""The sections of manifest.json as typed records (the `Manifest` holds them; manifest.py):
a stored feature (what the readers restore a column from), a split's files and shards, the
split rule, the sharding, the bad-row files and a SequenceExample output's `sequence` section.
Each turns into its JSON form and back (`to_json`, `from_json`) where it has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.encode.features import FeatureSpec, row_lengths_specs

__all__ = [
    "BadRowFiles",
    "SequenceSection",
    "ShardEntry",
    "Sharding",
    "SplitEntry",
    "SplitRule",
    "StoredFeature",
    "with_row_lengths",
]


@dataclasses.dataclass(frozen=True)
class StoredFeature:
    """One manifest feature entry: the writer's FeatureSpec and how many rows were null."""

    spec: FeatureSpec
    null_count: int = 0

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> StoredFeature:
        return cls(FeatureSpec.from_json(entry), int(entry.get("null_count", 0)))

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "null_count": int(self.null_count)}

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


def with_row_lengths(features: Sequence[StoredFeature]) -> list[StoredFeature]:
    """`features` and, after each list ragged below its first level, its row-lengths features
    (int64 lists, absent exactly where the column is null): every key the records hold, each
    with statistics of its own."""
    out = []
    for f in features:
        out.append(f)
        out += [StoredFeature(spec, f.null_count) for spec in row_lengths_specs(f.spec)]
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
