"""Safe column expressions for `filter` and `derive`: parsed with `ast`, never evaluated.

The text is parsed by Python's `ast` in "eval" mode and every node is checked against a small
whitelist; the tree is then compiled into a function of closures that call pyarrow.compute on
whole columns. Nothing the user wrote is ever passed to `eval`/`exec`, attributes and subscripts
do not exist, and only the functions listed in `FUNCTIONS` can be called.

Grammar (Python syntax, a subset):
  numbers, 'strings', True, False          constants
  name, col('any name')                    a column (col() for names that are not identifiers)
  + - * /  unary -                         arithmetic; / is true division (float64)
  < <= > >= == !=  (chains allowed)        comparisons
  x in [c1, c2], x not in (c1, c2)         membership in a list of constants
  and  or  not                             boolean logic (Kleene: null and False is False)
  f(x, ...) for f in FUNCTIONS

Nulls: an operation with a null operand gives null (except Kleene `and`/`or`, `coalesce`,
`is_null`). A result outside the function's domain is null: x / 0, log(x <= 0),
sqrt(x < 0), log1p(x <= -1). NaN stays NaN. Integer overflow is an error (the caller names the
row). Types are checked once, when the expression is planned against the step's input schema.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["FUNCTIONS", "Expr", "ExprError", "parse_expr"]

MAX_LENGTH = 2000
MAX_NODES = 400


class ExprError(ValueError):
    """An expression that is not allowed or does not type-check (the caller adds file and key)."""


Value = pa.Array | pa.ChunkedArray | pa.Scalar
Node = Callable[[pa.Table], Value]


def _null_like(x: Value) -> pa.Scalar:
    return pa.scalar(None, x.type)


def _float(x: Value) -> Value:
    t = x.type
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(x, pa.float64())
    return x


def _domain(x: Value, bad: Value, result: Value) -> Value:
    """`result`, null where `bad` holds (a value outside the function's domain)."""
    return pc.if_else(bad, _null_like(result), result)


def _divide(a: Value, b: Value) -> Value:
    a, b = _float(a), _float(b)
    return _domain(b, pc.equal(b, 0), pc.divide(a, b))


def _sqrt(x: Value) -> Value:
    x = _float(x)
    return _domain(x, pc.less(x, 0), pc.sqrt(x))


def _log(x: Value) -> Value:
    x = _float(x)
    return _domain(x, pc.less_equal(x, 0), pc.ln(x))


def _log1p(x: Value) -> Value:
    x = _float(x)
    return _domain(x, pc.less_equal(x, -1), pc.log1p(x))


def _round(x: Value, ndigits: Value | None = None) -> Value:
    if ndigits is None:
        return pc.round(x, round_mode="half_to_even")
    if not isinstance(ndigits, pa.Scalar) or not pa.types.is_integer(ndigits.type):
        raise ExprError("round(x, ndigits): ndigits must be an integer constant")
    return pc.round(x, ndigits=ndigits.as_py(), round_mode="half_to_even")


# name -> (function, minimum arguments, maximum arguments or None for any)
FUNCTIONS: dict[str, tuple[Callable[..., Value], int, int | None]] = {
    "abs": (pc.abs_checked, 1, 1),
    "sqrt": (_sqrt, 1, 1),
    "log": (_log, 1, 1),
    "log1p": (_log1p, 1, 1),
    "exp": (lambda x: pc.exp(_float(x)), 1, 1),
    "floor": (pc.floor, 1, 1),
    "ceil": (pc.ceil, 1, 1),
    "round": (_round, 1, 2),
    "min": (lambda *xs: pc.min_element_wise(*xs, skip_nulls=False), 2, None),
    "max": (lambda *xs: pc.max_element_wise(*xs, skip_nulls=False), 2, None),
    "where": (pc.if_else, 3, 3),
    "coalesce": (pc.coalesce, 2, None),
    "is_null": (lambda x: pc.is_null(x), 1, 1),
}

_BINARY = {
    ast.Add: ("+", pc.add_checked),
    ast.Sub: ("-", pc.subtract_checked),
    ast.Mult: ("*", pc.multiply_checked),
    ast.Div: ("/", _divide),
}
_COMPARE = {
    ast.Lt: ("<", pc.less),
    ast.LtE: ("<=", pc.less_equal),
    ast.Gt: (">", pc.greater),
    ast.GtE: (">=", pc.greater_equal),
    ast.Eq: ("==", pc.equal),
    ast.NotEq: ("!=", pc.not_equal),
}


def _apply(what: str, fn: Callable[..., Value], *args: Any) -> Value:
    """Call a compute function; a type mismatch becomes an ExprError naming the operation."""
    try:
        return fn(*args)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as err:
        types = ", ".join(str(a.type) for a in args if hasattr(a, "type"))
        raise ExprError(f"{what} cannot take ({types})") from err


def _membership(value: Value, items: Sequence[Any], negate: bool) -> Value:
    try:
        value_set = pc.cast(pa.array(list(items)), value.type)
    except (pa.ArrowException, TypeError, ValueError) as err:
        raise ExprError(f"'in': {list(items)} are not values of type {value.type}") from err
    found = _apply("'in'", lambda v: pc.is_in(v, value_set=value_set), value)
    if negate:
        found = pc.invert(found)
    return pc.if_else(pc.is_valid(value), found, pa.scalar(None, pa.bool_()))


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.columns: set[str] = set()
        self.nodes = 0

    def fail(self, node: ast.AST, message: str) -> ExprError:
        col = getattr(node, "col_offset", None)
        at = f" at offset {col}" if col is not None else ""
        return ExprError(f"expression {self.text!r}{at}: {message}")

    def constant(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bool):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)
        ):
            return -node.operand.value
        if isinstance(node, ast.Constant) and node.value is None:
            raise self.fail(node, "None is not a value here; test for null with is_null(x)")
        raise self.fail(node, "expected a constant (number, string, True or False)")

    def column(self, name: str) -> Node:
        self.columns.add(name)
        return lambda table: table.column(name)

    def compile(self, node: ast.AST) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(node, f"more than {MAX_NODES} syntax nodes")
        if isinstance(node, ast.Constant):
            scalar = pa.scalar(self.constant(node))
            return lambda table: scalar
        if isinstance(node, ast.Name):
            return self.column(node.id)
        if isinstance(node, ast.UnaryOp):
            operand = self.compile(node.operand)
            if isinstance(node.op, ast.USub):
                return lambda t: _apply("unary -", pc.negate_checked, operand(t))
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return lambda t: _apply("'not'", pc.invert, operand(t))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            symbol, fn = _BINARY[type(node.op)]
            left, right = self.compile(node.left), self.compile(node.right)
            return lambda t: _apply(f"'{symbol}'", fn, left(t), right(t))
        if isinstance(node, ast.BoolOp):
            fn = pc.and_kleene if isinstance(node.op, ast.And) else pc.or_kleene
            word = "and" if isinstance(node.op, ast.And) else "or"
            parts = [self.compile(v) for v in node.values]

            def boolop(t: pa.Table) -> Value:
                out = parts[0](t)
                for part in parts[1:]:
                    out = _apply(f"'{word}'", fn, out, part(t))
                return out

            return boolop
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, f"{type(node).__name__} is not allowed")

    def compare(self, node: ast.Compare) -> Node:
        operands = [self.compile(node.left)]
        tests: list[Callable[[Value, pa.Table], Value]] = []
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                if not isinstance(right, ast.List | ast.Tuple) or not right.elts:
                    raise self.fail(right, "'in' needs a list of constants: x in [1, 2]")
                items = [self.constant(e) for e in right.elts]
                negate = isinstance(op, ast.NotIn)
                tests.append(lambda left, t, i=items, n=negate: _membership(left, i, n))
                operands.append(operands[-1])
                continue
            if type(op) not in _COMPARE:
                raise self.fail(node, f"{type(op).__name__} is not allowed")
            symbol, fn = _COMPARE[type(op)]
            compiled = self.compile(right)
            tests.append(
                lambda left, t, s=symbol, f=fn, r=compiled: _apply(f"'{s}'", f, left, r(t))
            )
            operands.append(compiled)

        def compare(t: pa.Table) -> Value:
            out = None
            for operand, test in zip(operands, tests, strict=False):
                result = test(operand(t), t)
                out = result if out is None else pc.and_kleene(out, result)
            return out

        return compare

    def call(self, node: ast.Call) -> Node:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node, "only plain function names can be called")
        name = node.func.id
        if node.keywords:
            raise self.fail(node, f"{name}(): keyword arguments are not allowed")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{name}(): *arguments are not allowed")
        if name == "col":
            if len(node.args) != 1 or not isinstance(self.constant(node.args[0]), str):
                raise self.fail(node, "col() takes one string: col('a column')")
            return self.column(node.args[0].value)
        if name not in FUNCTIONS:
            raise self.fail(
                node, f"unknown function {name!r} (known: {sorted([*FUNCTIONS, 'col'])})"
            )
        fn, low, high = FUNCTIONS[name]
        if len(node.args) < low or (high is not None and len(node.args) > high):
            raise self.fail(node, f"{name}() takes {low}{'' if high == low else '+'} arguments")
        args = [self.compile(a) for a in node.args]
        return lambda t: _apply(f"{name}()", fn, *(a(t) for a in args))


class Expr:
    """A compiled expression: `evaluate(table)` gives one value per row (a pa.Array)."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ExprError("an expression must be a non-empty string")
        if len(text) > MAX_LENGTH:
            raise ExprError(f"expression longer than {MAX_LENGTH} characters")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise ExprError(f"expression {text!r}: not valid syntax: {err}") from err
        compiler = _Compiler(text)
        try:
            self._root = compiler.compile(tree.body)
        except RecursionError as err:
            raise ExprError(f"expression {text!r}: nested too deeply") from err
        self.text = text
        self.columns = frozenset(compiler.columns)

    def __reduce__(self) -> tuple:
        return (Expr, (self.text,))  # pickled as text, compiled again where it is unpickled

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def evaluate(self, table: pa.Table) -> pa.Array:
        out = self._root(table)
        if isinstance(out, pa.Scalar):
            out = pa.repeat(out, table.num_rows)
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return out

    def result_type(self, schema: pa.Schema) -> pa.DataType:
        """The type of the result on `schema`; raises ExprError for a column or type mismatch."""
        missing = sorted(self.columns - set(schema.names))
        if missing:
            raise ExprError(
                f"expression {self.text!r}: column {missing[0]!r} is not in the input "
                f"(columns: {', '.join(schema.names)})"
            )
        try:
            return self.evaluate(schema.empty_table()).type
        except ExprError as err:
            raise ExprError(f"expression {self.text!r}: {err}") from err


def parse_expr(text: str) -> Expr:
    """Parse and check `text` against the whitelist; raises ExprError."""
    return Expr(text)
