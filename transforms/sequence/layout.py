"""The `sequence:` config section and its plan: which columns are the context of a
tf.train.SequenceExample and which are its feature lists.

Two ways to make sequences:
- grouped (`group_by`, optional `order_by`): the rows with the same key values make one
  SequenceExample; the key columns and the `context` columns are its context (one value per
  sequence, checked to be the same in every row), the `features` columns (by default every
  other column) its feature lists, one Feature per row in `order_by` order.
- a list column (`column`): a `list<struct>` column's elements are the steps of its row's
  SequenceExample, each struct field a feature list (named `column.field`); the other columns
  (or `context`) are the context. No grouping.

Plain data and checks; no Beam, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from transforms.encode.schema import ColumnOptions, FeatureSpec, SchemaError, plan_features

__all__ = ["SequenceError", "SequenceLayout", "SequenceOptions", "parse_sequence", "plan_sequence"]

_KEYS = ("group_by", "order_by", "context", "features", "column")


class SequenceError(ValueError):
    """A `sequence:` section that is malformed; names the key."""


@dataclasses.dataclass(frozen=True)
class SequenceOptions:
    """The `sequence:` section as configured (before it meets a schema)."""

    group_by: tuple[str, ...] = ()
    order_by: str | None = None
    context: tuple[str, ...] = ()
    features: tuple[str, ...] = ()  # empty: every column not in group_by or context
    column: str | None = None  # a list<struct> column whose elements are the steps

    @property
    def grouped(self) -> bool:
        return self.column is None

    def to_json(self) -> dict[str, Any]:
        return {
            "group_by": list(self.group_by),
            "order_by": self.order_by,
            "context": list(self.context),
            "features": list(self.features),
            "column": self.column,
        }


def _names(source: str, key: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        raise SequenceError(f"{source}: key 'sequence.{key}': expected a column or a list of them")
    if len(set(items)) != len(items):
        raise SequenceError(f"{source}: key 'sequence.{key}': a column is named twice")
    return tuple(items)


def parse_sequence(raw: Any, source: str) -> SequenceOptions:
    """The `sequence:` mapping of a config file; SequenceError naming `source` and the key."""
    if not isinstance(raw, Mapping):
        raise SequenceError(f"{source}: key 'sequence': expected a mapping")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise SequenceError(
            f"{source}: key 'sequence.{unknown[0]}' is unknown (known: {sorted(_KEYS)})"
        )
    values: dict[str, Any] = {}
    for key in ("group_by", "context", "features"):
        if raw.get(key) is not None:
            values[key] = _names(source, key, raw[key])
    for key in ("order_by", "column"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str) or not raw[key]:
                raise SequenceError(f"{source}: key 'sequence.{key}': expected a column name")
            values[key] = raw[key]
    options = SequenceOptions(**values)
    if options.column is not None and (options.group_by or options.order_by):
        raise SequenceError(
            f"{source}: key 'sequence.column': a list column makes one sequence per row; "
            "it takes no group_by or order_by"
        )
    if options.column is None and not options.group_by:
        raise SequenceError(
            f"{source}: key 'sequence': needs group_by (rows grouped into sequences) or "
            "column (a list<struct> column whose elements are the steps)"
        )
    pairs = [("group_by", "context"), ("group_by", "features"), ("context", "features")]
    for a, b in pairs:
        both = sorted(set(getattr(options, a)) & set(getattr(options, b)))
        if both:
            raise SequenceError(f"{source}: key 'sequence': {both} in both {a} and {b}")
    if options.order_by in options.group_by:
        raise SequenceError(f"{source}: key 'sequence.order_by': {options.order_by!r} is a key")
    return options


@dataclasses.dataclass(frozen=True)
class SequenceLayout:
    """A planned `sequence:` section: the context features (one value per sequence) and the
    step features (one Feature per step), each sorted by name (the order they are written)."""

    options: SequenceOptions
    context: tuple[FeatureSpec, ...]
    steps: tuple[FeatureSpec, ...]

    @property
    def grouped(self) -> bool:
        return self.options.grouped

    def columns(self) -> tuple[str, ...]:
        """The top-level columns a grouped sequence reads (keys, order, context, steps)."""
        names = [*self.options.group_by]
        if self.options.order_by is not None:
            names.append(self.options.order_by)
        names += [s.path[0] for s in (*self.context, *self.steps)]
        return tuple(dict.fromkeys(names))

    def checked_context(self) -> tuple[FeatureSpec, ...]:
        """The context features whose value is checked per sequence (all but the keys)."""
        return tuple(s for s in self.context if s.path[0] not in self.options.group_by)


def _plain(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _check_key(name: str, t: pa.DataType) -> None:
    t = _plain(t)
    keyable = (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_temporal(t)
    )
    if not keyable:
        raise SchemaError(
            f"sequence.group_by: column {name!r} is {t}; a key is integers, bool, text, "
            "binary, a date or a timestamp"
        )


def _check_order(name: str, t: pa.DataType) -> None:
    t = _plain(t)
    if pa.types.is_nested(t) or pa.types.is_null(t):
        raise SchemaError(f"sequence.order_by: column {name!r} is {t}, which has no order")


def _list_of_struct(name: str, t: pa.DataType) -> pa.StructType:
    is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    if not is_list or not pa.types.is_struct(t.value_type):
        raise SchemaError(f"sequence.column: column {name!r} is {t}, not a list of structs")
    return t.value_type


def _missing(schema: pa.Schema, key: str, names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise SchemaError(
            f"sequence.{key}: {missing} not among the columns (columns: {schema.names})"
        )


def _plan_grouped(
    options: SequenceOptions,
    schema: pa.Schema,
    columns: Mapping[str, ColumnOptions],
    shapes: Mapping[str, tuple[int, ...]],
) -> SequenceLayout:
    _missing(schema, "group_by", options.group_by)
    _missing(schema, "context", options.context)
    _missing(schema, "features", options.features)
    for name in options.group_by:
        _check_key(name, schema.field(name).type)
    if options.order_by is not None:
        _missing(schema, "order_by", (options.order_by,))
        _check_order(options.order_by, schema.field(options.order_by).type)
    context = (*options.group_by, *options.context)
    steps = options.features or tuple(n for n in schema.names if n not in context)
    if not steps:
        raise SchemaError("sequence.features: no column is left for the feature lists")
    chosen = [n for n in schema.names if n in context or n in steps]

    def owner(key: str) -> str | None:
        return next((c for c in schema.names if key == c or key.startswith(c + ".")), None)

    unused = sorted(k for k in columns if owner(k) not in chosen)
    if unused:
        raise SchemaError(
            f"columns {unused} in the config are not context or feature columns of the sequence"
        )
    specs = plan_features(pa.schema([schema.field(n) for n in chosen]), columns, shapes)
    return SequenceLayout(
        options,
        tuple(s for s in specs if s.path[0] in context),
        tuple(s for s in specs if s.path[0] in steps),
    )


def _plan_list(
    options: SequenceOptions,
    schema: pa.Schema,
    columns: Mapping[str, ColumnOptions],
    shapes: Mapping[str, tuple[int, ...]],
) -> SequenceLayout:
    name = options.column
    _missing(schema, "column", (name,))
    struct = _list_of_struct(name, schema.field(name).type)
    fields = [struct.field(i) for i in range(struct.num_fields)]
    if options.features:
        unknown = [f for f in options.features if struct.get_field_index(f) < 0]
        if unknown:
            raise SchemaError(f"sequence.features: {unknown} are not fields of {name!r} ({struct})")
        fields = [f for f in fields if f.name in options.features]
    if not fields:
        raise SchemaError(f"sequence.column: {name!r} has no field for the feature lists")
    _missing(schema, "context", options.context)
    context = options.context or tuple(n for n in schema.names if n != name)
    prefix = f"{name}."
    step_options = {k: v for k, v in columns.items() if k.startswith(prefix)}
    context_options = {k: v for k, v in columns.items() if not k.startswith(prefix)}
    steps = plan_features(pa.schema([pa.field(name, pa.struct(fields))]), step_options, shapes)
    ctx_schema = pa.schema([schema.field(n) for n in context])
    return SequenceLayout(
        options, tuple(plan_features(ctx_schema, context_options, shapes)), tuple(steps)
    )


def plan_sequence(
    options: SequenceOptions,
    schema: pa.Schema,
    columns: Mapping[str, ColumnOptions] | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> SequenceLayout:
    """The layout of `options` over `schema` (the columns as they reach the encoder), with
    the `columns:` options and the inferred shapes of nested lists; SchemaError naming the
    key and the column for what does not fit."""
    columns, shapes = dict(columns or {}), dict(shapes or {})
    if options.grouped:
        layout = _plan_grouped(options, schema, columns, shapes)
    else:
        layout = _plan_list(options, schema, columns, shapes)
    for spec in (*layout.context, *layout.steps):
        if spec.partition_levels:
            raise SchemaError(
                f"column {spec.name!r}: a list ragged below its first level (shape "
                f"{list(spec.shape)}) has no SequenceExample form here; give it a fixed inner "
                f"shape (columns.{spec.name}.shape) or write flat Examples"
            )
    return layout
