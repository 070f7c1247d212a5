"""Steps fitted by a full pass: zscore, min_max, vocabulary, bucketize."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.preprocess import ops
from transforms.preprocess.analyzers import DEFAULT_EPSILON, Moments, Quantiles, Range, Vocabulary
from transforms.preprocess.base import INT, KEY, NUM, NUMBER, ColumnStep, is_keyable
from transforms.preprocess.spec import Param, StepConfig

__all__ = ["Bucketize", "MinMax", "VocabularyStep", "ZScore"]


class ZScore(ColumnStep):
    kind = "zscore"
    needs = NUMBER

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.float64()

    def analyzer(self) -> Any | None:
        return Moments()

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.zscore(arr, fitted["mean"], fitted["std"])


class MinMax(ColumnStep):
    kind = "min_max"
    params = {**ColumnStep.params, "min": Param(NUM, default=0.0), "max": Param(NUM, default=1.0)}
    needs = NUMBER

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if not config["min"] < config["max"]:
            raise config.error("max", f"must be above min ({config['min']})")

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.float64()

    def analyzer(self) -> Any | None:
        return Range()

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        low, high = self.config["min"], self.config["max"]
        return ops.min_max(arr, fitted["min"], fitted["max"], float(low), float(high))


class VocabularyStep(ColumnStep):
    kind = "vocabulary"
    params = {
        **ColumnStep.params,
        "top_k": Param(INT),
        "min_frequency": Param(INT, default=1),
        "num_oov_buckets": Param(INT, default=0),
    }
    needs = KEY

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        for param, least in (("top_k", 1), ("min_frequency", 1), ("num_oov_buckets", 0)):
            if config[param] is not None and config[param] < least:
                raise config.error(param, f"must be at least {least}")

    def accepts(self, t: pa.DataType) -> bool:
        return is_keyable(t)

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.int64()

    def domain(self) -> int | None:
        top_k = self.config["top_k"]
        return None if top_k is None else top_k + self.config["num_oov_buckets"]

    @property
    def binary(self) -> bool:
        return pa.types.is_binary(self.in_type) or pa.types.is_large_binary(self.in_type)

    def analyzer(self) -> Any | None:
        return Vocabulary(self.config["top_k"], self.config["min_frequency"])

    def prepare(self, result: Mapping[str, Any]) -> Any:
        return pa.array(result["values"], pa.binary() if self.binary else pa.string())

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.vocabulary_ids(arr, fitted, self.config["num_oov_buckets"])


class Bucketize(ColumnStep):
    kind = "bucketize"
    params = {
        **ColumnStep.params,
        "num_buckets": Param(INT, required=True),
        "epsilon": Param(NUM, default=DEFAULT_EPSILON),
    }
    needs = NUMBER

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        if config["num_buckets"] < 1:
            raise config.error("num_buckets", "must be at least 1")
        if not 0 < config["epsilon"] < 1:
            raise config.error("epsilon", "must be between 0 and 1")

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return pa.int64()

    def domain(self) -> int | None:
        return self.config["num_buckets"]

    def analyzer(self) -> Any | None:
        return Quantiles(self.config["num_buckets"], float(self.config["epsilon"]))

    def prepare(self, result: Mapping[str, Any]) -> Any:
        return np.asarray(result["boundaries"], dtype=np.float64)

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        return ops.bucketize(arr, fitted)
