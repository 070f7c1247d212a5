"""Steps over the whole table: select, drop, rename, filter, derive."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.preprocess import ops
from transforms.preprocess.base import STR, Step, with_field
from transforms.preprocess.expr import Expr, ExprError
from transforms.preprocess.spec import Param, StepConfig

__all__ = ["Derive", "Drop", "Filter", "Rename", "Select"]


class Select(Step):
    kind = "select"
    params = {"columns": Param((list,), required=True)}
    structural = True

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        names = config["columns"]
        if not names or not all(isinstance(n, str) for n in names):
            raise config.error("columns", "expected a non-empty list of column names")
        if len(set(names)) != len(names):
            raise config.error("columns", "a column is listed twice")

    def plan(self, schema: pa.Schema) -> pa.Schema:
        for name in self.config["columns"]:
            self.require_column(schema, name, "columns")
        self.domains = {k: v for k, v in self.domains.items() if k in self.config["columns"]}
        return pa.schema([schema.field(n) for n in self.config["columns"]])

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        return ops.select(table, self.config["columns"])


class Drop(Select):
    kind = "drop"

    def plan(self, schema: pa.Schema) -> pa.Schema:
        gone = set(self.config["columns"])
        for name in gone:
            self.require_column(schema, name, "columns")
        self.domains = {k: v for k, v in self.domains.items() if k not in gone}
        return pa.schema([f for f in schema if f.name not in gone])

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        return ops.drop(table, self.config["columns"])


class Rename(Step):
    kind = "rename"
    params = {"columns": Param((dict,), required=True)}
    structural = True

    @classmethod
    def check_params(cls, config: StepConfig) -> None:
        mapping = config["columns"]
        if not mapping or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise config.error("columns", "expected a mapping of old name -> new name")
        if len(set(mapping.values())) != len(mapping):
            raise config.error("columns", "two columns get the same new name")

    def plan(self, schema: pa.Schema) -> pa.Schema:
        mapping: dict[str, str] = self.config["columns"]
        for old in mapping:
            self.require_column(schema, old, f"columns.{old}")
        for old, new in mapping.items():
            if new in schema.names and new not in mapping:
                raise self.config.error(f"columns.{old}", f"column {new!r} already exists")
        self.mapping = dict(mapping)
        self.domains = {mapping.get(k, k): v for k, v in self.domains.items()}
        return pa.schema([f.with_name(mapping.get(f.name, f.name)) for f in schema])

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        return ops.rename(table, self.mapping)


class Filter(Step):
    """Keeps the rows where `expr` is true (false and null drop the row)."""

    kind = "filter"
    params = {"expr": Param(STR, required=True)}
    filters = True

    def plan(self, schema: pa.Schema) -> pa.Schema:
        try:
            self.expr = Expr(self.config["expr"])
            result = self.expr.result_type(schema)
        except ExprError as err:
            raise self.config.error("expr", str(err)) from err
        if not pa.types.is_boolean(result):
            raise self.config.error("expr", f"gives {result}, a filter needs true/false")
        self.reads = self.expr.columns
        return schema

    def mask(self, table: pa.Table) -> pa.Array:
        return pc.fill_null(self.expr.evaluate(table), False)

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        return table.filter(self.mask(table))


class Derive(Step):
    """A column computed from an expression (replaces a column of the same name)."""

    kind = "derive"
    params = {"name": Param(STR, required=True), "expr": Param(STR, required=True)}

    def plan(self, schema: pa.Schema) -> pa.Schema:
        try:
            self.expr = Expr(self.config["expr"])
            result = self.expr.result_type(schema)
        except ExprError as err:
            raise self.config.error("expr", str(err)) from err
        name = self.config["name"]
        self.reads, self.writes = self.expr.columns, frozenset([name])
        self.domains.pop(name, None)
        return with_field(schema, name, result)

    @property
    def error_column(self) -> str:
        return self.config["name"]

    def apply(self, table: pa.Table, fitted: Any = None) -> pa.Table:
        return ops.set_column(table, self.config["name"], self.expr.evaluate(table))
