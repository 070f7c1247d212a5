"""Arrow types from their names in the config (`columns.<name>.type`), nested ones included.

The names are those pyarrow prints (`str(type)`), so a type copied from `plan`, from the
manifest or from `pq.read_schema` reads back as the same type:

    int64, float32, string, large_binary, date32, bool, null, ...   (pyarrow's aliases)
    timestamp[ms], timestamp[us, tz=Europe/Paris], time64[ns], duration[s], date64[ms]
    decimal128(10, 2), decimal256(76, 38), fixed_size_binary[16]
    list<int64>, list<item: int64>, large_list<string>, fixed_size_list<int32>[4]
    map<string, int64>, map<string, list<double>>
    struct<x: int64, y: list<string>>
    dictionary<values=string, indices=int32, ordered=0>

A recursive-descent parser over that text, nothing evaluated. An unknown name or a text that
is not a type raises ValueError saying where it stopped.
"""

from __future__ import annotations

import re

import pyarrow as pa

__all__ = ["parse_type"]

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|-?\d+|[<>\[\](),:=]|[^\s<>\[\](),:=]+)")
_UNITS = ("s", "ms", "us", "ns")


class _Text:
    """The type's text as tokens, read left to right."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or not m.group(1):
                break
            self.tokens.append((m.group(1), m.start(1)))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self) -> str:
        if self.i >= len(self.tokens):
            raise self.error("the text ends early")
        self.i += 1
        return self.tokens[self.i - 1][0]

    def expect(self, token: str) -> None:
        got = self.peek()
        if got != token:
            raise self.error(f"expected {token!r}")
        self.i += 1

    def error(self, what: str) -> ValueError:
        at = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        return ValueError(f"{self.text!r}: {what} at character {at}")


def parse_type(text: str) -> pa.DataType:
    """The Arrow type named `text` (as pyarrow prints it, or one of its aliases)."""
    source = _Text(str(text).strip())
    t = _type(source)
    if source.peek() is not None:
        raise source.error("unexpected text after the type")
    return t


def _type(s: _Text) -> pa.DataType:
    name = s.take()
    if name in ("list", "large_list", "fixed_size_list"):
        s.expect("<")
        field = _field(s, "item")
        s.expect(">")
        if name == "fixed_size_list":
            return pa.list_(field, _bracketed_int(s))
        if s.peek() == "[":  # list<...>[n]: pyarrow's other spelling of a fixed size
            return pa.list_(field, _bracketed_int(s))
        return pa.large_list(field) if name == "large_list" else pa.list_(field)
    if name == "map":
        s.expect("<")
        key = _type(s)
        s.expect(",")
        item = _type(s)
        keys_sorted = False
        if s.peek() == ",":
            s.take()
            keys_sorted = s.take() == "keys_sorted"
        s.expect(">")
        return pa.map_(key, item, keys_sorted)
    if name == "struct":
        s.expect("<")
        fields = []
        while s.peek() != ">":
            fields.append(_named_field(s))
            if s.peek() == ",":
                s.take()
        s.expect(">")
        return pa.struct(fields)
    if name == "dictionary":
        return _dictionary(s)
    if name in ("timestamp", "time32", "time64", "duration", "date32", "date64"):
        return _temporal(s, name)
    if name.startswith("decimal") and s.peek() == "(":
        s.take()
        precision = int(s.take())
        s.expect(",")
        scale = int(s.take())
        s.expect(")")
        return _decimal(s, name, precision, scale)
    if name == "fixed_size_binary":
        return pa.binary(_bracketed_int(s))
    try:
        return pa.type_for_alias(name)
    except (ValueError, KeyError):
        s.i -= 1
        raise s.error(f"unknown type {name!r}") from None


def _field(s: _Text, default_name: str) -> pa.Field:
    """A list's value: `T` or `name: T` (a trailing ` not null` is read too)."""
    if s.i + 1 < len(s.tokens) and s.tokens[s.i + 1][0] == ":":
        return _named_field(s)
    return _nullable(s, pa.field(default_name, _type(s)))


def _named_field(s: _Text) -> pa.Field:
    """`name: T`; the name is the text up to the colon (spaces in it kept)."""
    if s.peek() is None:
        raise s.error("the text ends early")
    start = s.tokens[s.i][1]
    while s.peek() not in (None, ":", ",", ">"):
        s.take()
    end = s.tokens[s.i][1] if s.i < len(s.tokens) else len(s.text)
    s.expect(":")
    return _nullable(s, pa.field(s.text[start:end].strip(), _type(s)))


def _nullable(s: _Text, field: pa.Field) -> pa.Field:
    if s.peek() == "not" and s.i + 1 < len(s.tokens) and s.tokens[s.i + 1][0] == "null":
        s.i += 2
        return field.with_nullable(False)
    return field


def _bracketed_int(s: _Text) -> int:
    s.expect("[")
    text = s.take()
    if not text.lstrip("-").isdigit() or int(text) < 0:
        s.i -= 1
        raise s.error("expected a size")
    s.expect("]")
    return int(text)


def _temporal(s: _Text, name: str) -> pa.DataType:
    if name in ("date32", "date64"):
        if s.peek() == "[":  # date32[day], date64[ms]
            s.take()
            s.take()
            s.expect("]")
        return pa.date32() if name == "date32" else pa.date64()
    s.expect("[")
    unit = s.take()
    if unit not in _UNITS:
        s.i -= 1
        raise s.error(f"unit {unit!r} is not one of {list(_UNITS)}")
    tz = None
    if name == "timestamp" and s.peek() == ",":
        s.take()
        s.expect("tz")
        s.expect("=")
        start = s.tokens[s.i][1] if s.i < len(s.tokens) else len(s.text)
        while s.peek() not in (None, "]"):
            s.take()
        end = s.tokens[s.i][1] if s.i < len(s.tokens) else len(s.text)
        tz = s.text[start:end].strip()
    s.expect("]")
    try:
        if name == "timestamp":
            return pa.timestamp(unit, tz)
        return {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[name](unit)
    except (ValueError, pa.ArrowInvalid) as err:
        raise s.error(str(err)) from None


def _decimal(s: _Text, name: str, precision: int, scale: int) -> pa.DataType:
    makers = {
        "decimal32": pa.decimal32,
        "decimal64": pa.decimal64,
        "decimal128": pa.decimal128,
        "decimal256": pa.decimal256,
        "decimal": pa.decimal128,
    }
    if name not in makers:
        raise s.error(f"unknown type {name!r}")
    try:
        return makers[name](precision, scale)
    except (ValueError, pa.ArrowInvalid) as err:
        raise s.error(str(err)) from None


def _dictionary(s: _Text) -> pa.DataType:
    """dictionary<values=T, indices=I, ordered=0|1>, in pyarrow's order."""
    s.expect("<")
    parts: dict[str, object] = {}
    while s.peek() != ">":
        key = s.take()
        s.expect("=")
        parts[key] = _type(s) if key in ("values", "indices") else s.take()
        if s.peek() == ",":
            s.take()
    s.expect(">")
    if "values" not in parts:
        raise s.error("a dictionary needs values=...")
    indices = parts.get("indices", pa.int32())
    return pa.dictionary(indices, parts["values"], str(parts.get("ordered", "0")) == "1")
