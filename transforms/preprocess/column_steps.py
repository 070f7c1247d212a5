"""Row-local column steps: cast, fill_missing, clip, log1p, hash_bucket, lower, strip, split,
reshape, one_hot. (fill_missing with a strategy also needs a full pass.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.schema import default_scalar
from transforms.preprocess import ops
from transforms.preprocess.analyzers import DEFAULT_EPSILON, Counts, Moments, Quantiles
from transforms.preprocess.base import (
    INT,
    KEY,
    NUM,
    NUMBER,
    STR,
    TEXT,
    ColumnStep,
    is_integer,
    is_keyable,
    is_list,
    is_numeric,
    is_text,
)
from transforms.preprocess.spec import Param, StepConfig

__all__ = [
    "Cast",
    "Clip",
    "FillMissing",
    "HashBucket",
    "Log1p",
    "Lower",
    "OneHot",
    "Reshape",
    "SplitText",
    "Strip",
]

ONE_HOT_DTYPES = ("float32", "float64", "int8", "int32", "int64")


class Cast(ColumnStep):
    kind = "cast"
    params = {**ColumnStep.params, "to": Param(STR, required=True)}
    needs = "a type that casts"

    def accepts(self, t: pa.DataType) -> bool:
        return True

    def output_type(self, t: pa.DataType) -> pa.DataType:
        try:
            to = pa.type_for_alias(self.config["to"])
        except (ValueError, KeyError) as err:
            raise self.config.error("to", f"unknown type {self.config['to']!r}") from err
        try:
            pc.cast(pa.array([], t), to)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as err:
            raise self.config.error(
                "to", f"column {self.column!r} ({t}) cannot be cast to {to}"
            ) from err
        return to

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.cast(arr, self.out_type)


class FillMissing(ColumnStep):
    kind = "fill_missing"
    params = {
        **ColumnStep.params,
        "value": Param((int, float, str, bool)),
        "strategy": Param(STR),
    }
    strategies = ("mean", "median", "most_frequent")

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if (config["value"] is None) == (config["strategy"] is None):
            raise config.error(None, "give exactly one of 'value' and 'strategy'")
        if config["strategy"] is not None and config["strategy"] not in cls.strategies:
            raise config.error(
                "strategy", f"{config['strategy']!r} is not one of {list(cls.strategies)}"
            )

    @property
    def needs(self) -> str:  # type: ignore[override]
        strategy = self.config["strategy"]
        return NUMBER if strategy in ("mean", "median") else "a scalar column"

    def accepts(self, t: pa.DataType) -> bool:
        strategy = self.config["strategy"]
        if strategy in ("mean", "median"):
            return is_numeric(t)
        if strategy == "most_frequent":
            return is_numeric(t) or is_text(t) or pa.types.is_boolean(t)
        return not (is_list(t) or pa.types.is_struct(t) or pa.types.is_null(t))

    def output_type(self, t: pa.DataType) -> pa.DataType:
        if self.config["strategy"] == "mean" and not pa.types.is_floating(t):
            return pa.float64()
        if self.config["value"] is not None:
            try:
                default_scalar(self.config["value"], t)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as err:
                raise self.config.error(
                    "value",
                    f"{self.config['value']!r} is not a value of column {self.column!r} ({t})",
                ) from err
        return t

    def analyzer(self) -> Any | None:
        strategy = self.config["strategy"]
        if strategy == "mean":
            return Moments()
        if strategy == "median":
            return Quantiles(2, DEFAULT_EPSILON)
        if strategy == "most_frequent":
            return Counts()
        return None

    def prepare(self, result: Mapping[str, Any]) -> Any:
        strategy = self.config["strategy"]
        if strategy == "mean":
            return result["mean"]
        if strategy == "median":
            return result["quantiles"][0] if result["quantiles"] else None
        return result["value"]

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        value = self.config["value"] if self.config["strategy"] is None else fitted
        if value is None:  # nothing to fit on: no row reached the analyzer
            return arr if arr.type == self.out_type else pc.cast(arr, self.out_type)
        return ops.fill_missing(arr, default_scalar(value, self.out_type))


class Clip(ColumnStep):
    kind = "clip"
    params = {**ColumnStep.params, "min": Param(NUM), "max": Param(NUM)}
    needs = NUMBER

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        low, high = config["min"], config["max"]
        if low is None and high is None:
            raise config.error(None, "give 'min', 'max' or both")
        if low is not None and high is not None and low > high:
            raise config.error("min", f"min {low} is above max {high}")

    def output_type(self, t: pa.DataType) -> pa.DataType:
        self.bounds = []
        for param in ("min", "max"):
            bound = self.config[param]
            if bound is not None and pa.types.is_integer(t) and not float(bound).is_integer():
                raise self.config.error(
                    param, f"{bound} is not an integer (column {self.column!r} is {t})"
                )
            try:
                self.bounds.append(None if bound is None else pa.scalar(bound).cast(t))
            except (pa.ArrowException, OverflowError) as err:
                raise self.config.error(param, f"{bound} does not fit in {t}") from err
        return t

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.clip(arr, *self.bounds)


class Log1p(ColumnStep):
    kind = "log1p"
    needs = NUMBER

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.float64()

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.log1p(arr)


class HashBucket(ColumnStep):
    kind = "hash_bucket"
    params = {**ColumnStep.params, "num_buckets": Param(INT, required=True)}
    needs = KEY

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if config["num_buckets"] < 1:
            raise config.error("num_buckets", "must be at least 1")

    def accepts(self, t: pa.DataType) -> bool:
        return is_keyable(t)

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.int64()

    def domain(self) -> int | None:
        return self.config["num_buckets"]

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.hash_bucket(arr, self.config["num_buckets"])


class _TextStep(ColumnStep):
    needs = TEXT

    def accepts(self, t: pa.DataType) -> bool:
        return is_text(t)


class Lower(_TextStep):
    kind = "lower"

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.lower(arr)


class Strip(_TextStep):
    kind = "strip"
    params = {**ColumnStep.params, "chars": Param(STR)}

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.strip(arr, self.config["chars"])


class SplitText(_TextStep):
    kind = "split"
    params = {**ColumnStep.params, "sep": Param(STR)}

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if config["sep"] == "":
            raise config.error("sep", "must not be empty (leave it out to split on whitespace)")

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.list_(t)

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        out = ops.split_text(arr, self.config["sep"])
        return out if out.type == self.out_type else pc.cast(out, self.out_type)


class Reshape(ColumnStep):
    kind = "reshape"
    params = {**ColumnStep.params, "shape": Param((list,), required=True)}
    needs = "a list column"

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        shape = config["shape"]
        if not shape or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
        ):
            raise config.error("shape", "expected a non-empty list of positive integers")

    def accepts(self, t: pa.DataType) -> bool:
        if not is_list(t):
            return False
        while is_list(t):
            t = t.value_type
        return not (pa.types.is_struct(t) or pa.types.is_map(t))

    def output_type(self, t: pa.DataType) -> pa.DataType:
        while is_list(t):
            t = t.value_type
        for dim in reversed(self.config["shape"]):
            t = pa.list_(t, int(dim))
        return t

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.reshape(arr, self.config["shape"])


class OneHot(ColumnStep):
    kind = "one_hot"
    params = {**ColumnStep.params, "depth": Param(INT), "dtype": Param(STR, default="float32")}
    needs = "integer ids"

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if config["depth"] is not None and config["depth"] < 1:
            raise config.error("depth", "must be at least 1")
        if config["dtype"] not in ONE_HOT_DTYPES:
            raise config.error("dtype", f"{config['dtype']!r} is not one of {list(ONE_HOT_DTYPES)}")

    def accepts(self, t: pa.DataType) -> bool:
        return is_integer(t)

    def output_type(self, t: pa.DataType) -> pa.DataType:
        depth = self.config["depth"] or self.domains.get(self.column)
        if depth is None:
            raise self.config.error(
                "depth",
                f"needed: column {self.column!r} is not the output of hash_bucket, bucketize "
                "or vocabulary with top_k, so the number of ids is not known",
            )
        self.depth = int(depth)
        return pa.list_(pa.type_for_alias(self.config["dtype"]), self.depth)

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.one_hot(arr, self.depth, self.out_type.value_type)
