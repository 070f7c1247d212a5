"""Arrow type -> tf.train.Example feature mapping: plain functions, no Beam, no TensorFlow.

`plan_features(schema, options)` turns an Arrow schema into one `FeatureSpec` per Example feature
(the spec itself, the kinds and the errors are in transforms/encode/features.py, without Arrow).
The specs are the contract between the writer (encoder) and the reader: the manifest stores them
and `pipeline.reader` rebuilds the parse spec from them.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from transforms.encode.features import (
    BYTES,
    FLOAT,
    FLOAT64_BYTES,
    INT64,
    NULL_POLICIES,
    VALUES,
    ColumnOptions,
    ConversionError,
    FeatureSpec,
    SchemaError,
)

__all__ = [
    "BYTES",
    "FLOAT",
    "FLOAT64_BYTES",
    "INT64",
    "NULL_POLICIES",
    "VALUES",
    "ColumnOptions",
    "ConversionError",
    "FeatureSpec",
    "SchemaError",
    "default_scalar",
    "is_list_type",
    "leaf_paths",
    "nested_list_columns",
    "plan_features",
]

_INT_DTYPES = {
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.bool_(): "bool",
}
_FLOAT_DTYPES = {pa.float16(): "float16", pa.float32(): "float32", pa.float64(): "float64"}


def _primitive(t: pa.DataType) -> tuple[str, str, str | None] | None:
    """(kind, dtype, unit) of a primitive Arrow type, or None when it is not one we map."""
    if pa.types.is_dictionary(t):
        return _primitive(t.value_type)
    if t in _INT_DTYPES:
        return INT64, _INT_DTYPES[t], None
    if t in _FLOAT_DTYPES:
        return FLOAT, _FLOAT_DTYPES[t], None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return BYTES, "string", None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return BYTES, "string", None
    if pa.types.is_fixed_size_binary(t):
        return BYTES, "string", None
    if pa.types.is_timestamp(t):
        unit = t.unit if t.tz is None else f"{t.unit} {t.tz}"
        return INT64, "int64", unit
    if pa.types.is_date(t):
        return INT64, "int64", "days"
    if pa.types.is_time(t) or pa.types.is_duration(t):
        return INT64, "int64", t.unit  # time of day / elapsed time in that unit
    if pa.types.is_decimal(t):
        return BYTES, "string", None
    if pa.types.is_null(t):
        return BYTES, "string", None
    return None


def is_list_type(t: pa.DataType) -> bool:
    """Whether `t` is a list, large list or fixed-size list."""
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _holds_fields(t: pa.DataType) -> bool:
    """Whether `t` is, below its list levels, a struct or a map (whose leaves are its own)."""
    while is_list_type(t):
        t = t.value_type
    return pa.types.is_struct(t) or pa.types.is_map(t)


def leaf_paths(schema: pa.Schema) -> tuple[list[tuple[tuple[str, ...], pa.DataType]], set[str]]:
    """Every leaf of the schema: (its field path, its type as one column), and the names of the
    inner nodes (structs, maps, lists of those). A struct's fields are leaves under it
    (`parent.child`); a map's keys and values are two leaves (`name.key`, `name.value`), each a
    list per row; a list of structs or maps makes each leaf below it a list per row (a list
    level around the leaf's type)."""
    leaves: list[tuple[tuple[str, ...], pa.DataType]] = []
    inner: set[str] = set()

    def visit(path: tuple[str, ...], t: pa.DataType, around: tuple[int | None, ...]) -> None:
        if pa.types.is_struct(t) or pa.types.is_map(t) or (is_list_type(t) and _holds_fields(t)):
            inner.add(".".join(path))
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit((*path, t.field(i).name), t.field(i).type, around)
        elif pa.types.is_map(t):
            visit((*path, "key"), t.key_type, (*around, None))
            visit((*path, "value"), t.item_type, (*around, None))
        elif is_list_type(t) and _holds_fields(t):
            size = t.list_size if pa.types.is_fixed_size_list(t) else None
            visit(path, t.value_type, (*around, size))
        else:
            for size in reversed(around):
                t = pa.list_(t) if size is None else pa.list_(t, size)
            leaves.append((path, t))

    for field in schema:
        visit((field.name,), field.type, ())
    return leaves, inner


def _list_levels(t: pa.DataType) -> tuple[list[int | None], pa.DataType]:
    """List nesting: per level its fixed size (None when variable), and the leaf type."""
    levels: list[int | None] = []
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        levels.append(t.list_size if pa.types.is_fixed_size_list(t) else None)
        t = t.value_type
    return levels, t


def default_scalar(default: Any, t: pa.DataType) -> pa.Scalar:
    """The null_policy 'default' value as a scalar of the column's (dictionary-decoded) type.

    Raises (pa.ArrowException, TypeError, ValueError) when the value is not one of that type.
    """
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_decimal(t) and isinstance(default, str | int | float):
        default = decimal.Decimal(str(default))  # YAML has no decimals: "1.50" or 1.5
    if pa.types.is_integer(t) and isinstance(default, float) and not default.is_integer():
        raise ValueError("not an integer")  # pa.scalar would truncate it
    return pa.scalar(default, t)


def _unsupported(name: str, t: pa.DataType) -> SchemaError:
    return SchemaError(
        f"column {name!r}: type {t} has no tf.train.Example mapping "
        "(supported: integers, bool, floats, string/binary, timestamp, date, time, duration, "
        "decimal, dictionaries of those, lists and fixed-size lists of those, structs and maps "
        "of those, lists of structs and maps)"
    )


def _leaf_spec(
    name: str,
    path: tuple[str, ...],
    t: pa.DataType,
    opts: ColumnOptions,
    inferred_shapes: Mapping[str, tuple[int, ...]],
) -> FeatureSpec:
    levels, leaf = _list_levels(t)
    prim = _primitive(leaf)
    if prim is None:
        raise _unsupported(name, t)
    kind, dtype, unit = prim
    encoding = VALUES
    if opts.keep_float64:
        if dtype != "float64":
            raise SchemaError(f"column {name!r}: keep_float64 needs a float64 column, not {leaf}")
        kind, encoding = BYTES, FLOAT64_BYTES
    shape: tuple[int, ...] | None
    if not levels:
        shape = ()
        if opts.shape not in (None, ()):
            raise SchemaError(
                f"column {name!r}: shape {list(opts.shape)} given for a scalar column"
            )
    elif opts.shape is not None:
        shape = tuple(int(d) for d in opts.shape)
        if len(shape) != len(levels):
            raise SchemaError(
                f"column {name!r}: shape {list(shape)} has rank {len(shape)}, "
                f"the column's type {t} has {len(levels)} list levels"
            )
        for dim, fixed in zip(shape, levels, strict=True):
            if fixed is not None and dim != fixed:
                raise SchemaError(f"column {name!r}: shape {list(shape)} disagrees with type {t}")
            if dim < -1:
                raise SchemaError(
                    f"column {name!r}: shape {list(shape)}: a dim is a size or -1 (it varies)"
                )
    elif all(size is not None for size in levels):
        shape = tuple(int(s) for s in levels)  # type: ignore[arg-type]
    elif len(levels) == 1:
        shape = None  # a variable-length list
    else:
        if name not in inferred_shapes:
            raise SchemaError(
                f"column {name!r}: nested list type {t} needs a shape "
                "(columns: {name: {shape: [...]}} in the config)"
            )
        shape = tuple(inferred_shapes[name])
        if len(shape) != len(levels):
            raise SchemaError(
                f"column {name!r}: cannot infer the shape of nested list type {t} from a value "
                f"of shape {list(shape)}; set columns.{name}.shape in the config"
            )
    if shape and 0 in shape:
        # Decided: refused, not written. Below a -1 a 0 dim leaves no values to count the
        # varying lists by, so their lengths could not be read back; in a fixed shape the
        # column holds nothing but its nulls. Parquet cannot hold a fixed_size_list of 0.
        raise SchemaError(
            f"column {name!r}: shape {list(shape)}: a dim of 0 holds no values (the lists "
            "around it could not be told apart); use -1 there (an empty list is then written "
            "and restored as one)"
        )
    if encoding == FLOAT64_BYTES and shape and any(d < 0 for d in shape[1:]):
        raise SchemaError(
            f"column {name!r}: keep_float64 writes a row's float64s as one bytes value, which "
            f"keeps no inner list lengths: shape {list(shape)} varies below its first dim"
        )
    if opts.null_policy not in NULL_POLICIES:
        raise SchemaError(
            f"column {name!r}: null_policy {opts.null_policy!r} is not one of {list(NULL_POLICIES)}"
        )
    if opts.null_policy == "default" and opts.default is None:
        raise SchemaError(f"column {name!r}: null_policy 'default' needs a 'default' value")
    if opts.null_policy == "default":
        try:
            default_scalar(opts.default, t)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as err:
            raise SchemaError(
                f"column {name!r}: default {opts.default!r} is not a value of type {t}: {err}"
            ) from err
    return FeatureSpec(
        name=name,
        path=path,
        kind=kind,
        dtype=dtype,
        shape=shape,
        encoding=encoding,
        source_type=str(t),
        null_policy=opts.null_policy,
        default=opts.default,
        unit=unit,
    )


def plan_features(
    schema: pa.Schema,
    columns: Mapping[str, ColumnOptions] | None = None,
    inferred_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> list[FeatureSpec]:
    """One FeatureSpec per Example feature, sorted by name (the order the encoder writes them).

    Raises SchemaError naming the column for a type with no mapping, for options that do not
    fit the column, and for options naming a column that does not exist.
    """
    columns = dict(columns or {})
    inferred_shapes = dict(inferred_shapes or {})
    leaves, inner = leaf_paths(schema)
    for name in inner.intersection(columns):  # a type of its own was applied as it was read
        if columns[name] == ColumnOptions(type=columns[name].type):
            del columns[name]
    on_inner = sorted(inner.intersection(columns))
    if on_inner:
        name = on_inner[0]
        below = sorted(".".join(p) for p, _ in leaves if ".".join(p).startswith(name + "."))
        raise SchemaError(
            f"column {name!r}: options apply to leaves, not to a struct or a map "
            f"(its leaves: {below})"
        )
    specs = []
    for path, t in leaves:
        name = ".".join(path)
        opts = columns.pop(name, ColumnOptions())
        specs.append(_leaf_spec(name, path, t, opts, inferred_shapes))
    if columns:
        raise SchemaError(
            f"columns {sorted(columns)} in the config are not in the input "
            f"(its leaves: {sorted(s.name for s in specs)})"
        )
    names = [key for s in specs for key in (*s.feature_keys, *s.null_keys)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaError(
            f"feature names {dupes} occur twice (a struct leaf, a list's row-lengths feature or "
            "the feature of its null positions clashes with a column)"
        )
    return sorted(specs, key=lambda s: s.name.encode("utf-8"))


def nested_list_columns(schema: pa.Schema) -> list[tuple[str, tuple[str, ...]]]:
    """Leaves whose type nests two or more list levels with a variable one: they need a shape."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for path, t in leaf_paths(schema)[0]:
        levels, _ = _list_levels(t)
        if len(levels) >= 2 and any(size is None for size in levels):
            out.append((".".join(path), path))
    return out
