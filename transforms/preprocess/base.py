"""The base of every step: parameters checked once, input types checked at construction, the
schema it leaves behind computed then, and `apply` over a batch at run time.

A column step reads `column` and writes `output` (default: the same column; a new name is
appended, an existing one replaced). An analyzer step (`analyzer()` is not None) needs a full
pass: its fitted result comes in as `fitted` (see analyzers.py for its fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from transforms.preprocess import ops
from transforms.preprocess.spec import Param, StepConfig

__all__ = [
    "KEY",
    "NUMBER",
    "TEXT",
    "ColumnStep",
    "Step",
    "is_integer",
    "is_keyable",
    "is_list",
    "is_numeric",
    "is_text",
    "with_field",
]

STR, INT, NUM = (str,), (int,), (float, int)
NUMBER = "a number (an integer or float column)"
TEXT = "text (a string column)"
KEY = "text, binary or integers"


def value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_integer(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def is_keyable(t: pa.DataType) -> bool:
    """Values a vocabulary or a hash can key on: text, binary, integers."""
    return is_text(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) or is_integer(t)


def is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def with_field(schema: pa.Schema, name: str, t: pa.DataType) -> pa.Schema:
    """`schema` with the column `name` of type `t`: replaced in place, or appended."""
    if name in schema.names:
        return schema.set(schema.get_field_index(name), pa.field(name, t))
    return schema.append(pa.field(name, t))


class Step:
    """A configured step planned against the schema it receives."""

    kind: ClassVar[str]
    params: ClassVar[dict[str, Param]]
    filters: ClassVar[bool] = False  # drops rows
    structural: ClassVar[bool] = False  # only removes or renames columns, never computes

    def __init__(self, config: StepConfig, schema: pa.Schema, domains: Mapping[str, int]) -> None:
        self.config = config
        self.reads: frozenset[str] = frozenset()
        self.writes: frozenset[str] = frozenset()
        self.domains = dict(domains)  # column -> number of ids (for one_hot), after the step
        self.output_schema = self.plan(schema)

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        """Checks that need no schema (ranges, exclusive parameters)."""

    def plan(self, schema: pa.Schema) -> pa.Schema:
        raise NotImplementedError

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        raise NotImplementedError

    def analyzer(self) -> Any | None:
        """The accumulator for this step's full pass, or None for a row-local step."""
        return None

    def prepare(self, result: Mapping[str, Any]) -> Any:
        """The fitted result in the form `apply` uses (built once per worker)."""
        return result

    @property
    def error_column(self) -> str:
        return next(iter(sorted(self.reads)), "")

    def require_column(self, schema: pa.Schema, name: str, param: str) -> pa.DataType:
        if name not in schema.names:
            raise self.config.error(
                param,
                f"column {name!r} is not in the input (columns: {', '.join(schema.names)})",
            )
        return value_type(schema.field(name).type)


class ColumnStep(Step):
    """Reads `column`, writes `output` (default: `column`)."""

    params = {"column": Param(STR, required=True), "output": Param(STR)}
    needs = ""  # what the input must be, for the wrong-type message

    def accepts(self, t: pa.DataType) -> bool:
        return is_numeric(t)

    def output_type(self, t: pa.DataType) -> pa.DataType:
        return t

    def domain(self) -> int | None:
        return None

    def plan(self, schema: pa.Schema) -> pa.Schema:
        self.column = self.config["column"]
        self.output = self.config["output"] or self.column
        t = self.require_column(schema, self.column, "column")
        if not self.accepts(t):
            raise self.config.error(
                "column", f"column {self.column!r} is {t}; {self.kind} needs {self.needs}"
            )
        out = self.output_type(t)
        self.reads, self.writes = frozenset([self.column]), frozenset([self.output])
        self.domains.pop(self.output, None)
        if self.domain() is not None:
            self.domains[self.output] = self.domain()
        self.in_type, self.out_type = t, out
        return with_field(schema, self.output, out)

    @property
    def error_column(self) -> str:
        return self.column

    def transform(self, arr: pa.Array, fitted: Any) -> pa.Array:
        raise NotImplementedError

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        out = self.transform(ops.column(table, self.column), fitted)
        return ops.set_column(table, self.output, out)
