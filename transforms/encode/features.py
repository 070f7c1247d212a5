"""What an Example feature is, without pyarrow: `FeatureSpec` (how a column is written and
restored: the contract the manifest stores), `ColumnOptions`, the kinds and encodings, and the
errors of the mapping. `transforms/encode/schema.py` maps Arrow types onto them; the manifest,
`inspect` and `verify` read them without importing Arrow."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BYTES",
    "FLOAT",
    "FLOAT64_BYTES",
    "INT64",
    "NULL_POLICIES",
    "NULL_POSITIONS",
    "VALUES",
    "ColumnOptions",
    "ConversionError",
    "FeatureSpec",
    "ImageSpec",
    "SchemaError",
    "nulls_key",
    "nulls_specs",
    "row_lengths_key",
    "row_lengths_specs",
]

NULL_POLICIES = ("omit", "default", "fail")

# The source_type of a feature of null positions (`nulls_specs`).
NULL_POSITIONS = "null positions"

# Example kinds.
INT64 = "int64"
FLOAT = "float"
BYTES = "bytes"

# Encodings (FeatureSpec.encoding): one Example value per element, or a row's float64s as bytes.
VALUES = "values"
FLOAT64_BYTES = "float64_bytes"


def row_lengths_key(name: str, level: int) -> str:
    """The feature that holds, for a list column ragged below its first level, the lengths of
    its level-`level` lists (level 1: the lists inside a row's list), element by element."""
    return f"{name}__row_lengths_{level}"


def row_lengths_specs(spec: FeatureSpec) -> list[FeatureSpec]:
    """The row-lengths features of a list ragged below its first level, as features of their
    own (int64 lists, null where the column is null): what verify checks, the statistics
    describe and the schema lists beside the column."""
    return [
        FeatureSpec(key, spec.path, INT64, "int64", None, VALUES, "row lengths", spec.null_policy)
        for key in spec.feature_keys[1:]
    ]


def nulls_key(name: str, level: int) -> str:
    """The feature that holds, in the rows of a list column whose level-`level` items hold
    nulls, the positions of those items among the row's level-`level` items (level 1: the
    elements of the row's list; the list's last level: its values, counted over the row)."""
    return f"{name}__nulls_{level}"


def nulls_specs(spec: FeatureSpec, levels: Sequence[int]) -> list[FeatureSpec]:
    """The null-position features of a list column's levels `levels` (those the run wrote),
    as features of their own (int64 lists, present only in rows with such nulls)."""
    return [
        FeatureSpec(
            nulls_key(spec.name, k), spec.path, INT64, "int64", None, VALUES, NULL_POSITIONS
        )
        for k in levels
    ]


class SchemaError(ValueError):
    """A column whose type or options have no Example mapping (found at construction)."""


class ConversionError(ValueError):
    """A value that cannot be written (found at run time); names file, row and column."""


@dataclasses.dataclass(frozen=True)
class ColumnOptions:
    """Per-column options from the config's `columns:` section."""

    null_policy: str = "omit"  # omit | default | fail
    default: Any = None  # the value written for a null under null_policy=default
    keep_float64: bool = False  # write float64 values exactly, as raw little-endian bytes
    shape: tuple[int, ...] | None = None  # shape of list columns (-1: a dim that varies)
    type: str | None = None  # the Arrow type the column is read in (docs/types.md)


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """A bytes feature that holds encoded images (a `files:` image column): the formats its
    values may be in, and the [height, width, channels] the readers decode them to, -1 where
    the images differ."""

    formats: tuple[str, ...]
    shape: tuple[int, int, int]

    def to_json(self) -> dict[str, Any]:
        return {"formats": list(self.formats), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageSpec:
        shape = tuple(int(d) for d in data["shape"])
        if len(shape) != 3:
            raise ValueError(f"an image's shape is [height, width, channels], not {shape}")
        return cls(tuple(str(f) for f in data["formats"]), shape)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One Example feature: how it is written and how the reader restores it.

    name: the feature key (struct leaves are `parent.child`).
    path: the field path in the Arrow table.
    kind: the Example list kind: int64 | float | bytes.
    dtype: the dtype the reader restores (a tf.dtypes name: int32, bool, float64, string, ...).
    shape: () for a scalar, (d0, d1, ...) for an array, None for a variable-length list. A dim
        of -1 varies: at d0 the row's outer length (the row's values are whole inner arrays);
        at d1 and below the lists of that level, whose lengths the features
        `row_lengths_key(name, k)` hold (`partition_levels`).
    encoding: "values" (one Example value per element) or "float64_bytes" (the row's float64
        elements as one little-endian bytes value).
    source_type: the Arrow type of the column, as text.
    unit: timestamp unit (and zone) or "days" for dates; None otherwise.
    image: for a bytes feature of encoded images, their formats and decoded shape; None
        otherwise (and then left out of the JSON, as in manifests from before it existed).
    """

    name: str
    path: tuple[str, ...]
    kind: str
    dtype: str
    shape: tuple[int, ...] | None
    encoding: str
    source_type: str
    null_policy: str = "omit"
    default: Any = None
    unit: str | None = None
    image: ImageSpec | None = None

    @property
    def partition_levels(self) -> tuple[int, ...]:
        """The list levels below the first whose lengths vary (-1 in the shape): each has its
        row-lengths feature, `row_lengths_key(name, level)`."""
        if not self.shape:
            return ()
        return tuple(k for k, d in enumerate(self.shape) if k > 0 and d < 0)

    @property
    def list_levels(self) -> int:
        """How many list levels the column has (0: a scalar): its levels 1 .. list_levels are
        the items that may be null inside a row's list (`nulls_key`)."""
        if self.shape is None:
            return 1
        return len(self.shape)

    @property
    def null_keys(self) -> tuple[str, ...]:
        """The null-position features this column may write, one per list level."""
        return tuple(nulls_key(self.name, k) for k in range(1, self.list_levels + 1))

    @property
    def feature_keys(self) -> tuple[str, ...]:
        """Every Example key this column writes: its values, then its row-lengths features."""
        return (self.name, *(row_lengths_key(self.name, k) for k in self.partition_levels))

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["path"] = list(self.path)
        out["shape"] = None if self.shape is None else list(self.shape)
        if self.image is None:
            del out["image"]
        else:
            out["image"] = self.image.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FeatureSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["path"] = tuple(kwargs["path"])
        kwargs["shape"] = None if kwargs.get("shape") is None else tuple(kwargs["shape"])
        if kwargs.get("image") is not None:
            kwargs["image"] = ImageSpec.from_json(kwargs["image"])
        return cls(**kwargs)
