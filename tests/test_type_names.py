"""`columns.<name>.type` takes any Arrow type as pyarrow prints it, nested ones included
(transforms/read/type_names.py): the parser reads back what `str(type)` gives, refuses what is
not a type with where it stopped, and a job reads JSON Lines and Parquet columns in such types.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli_captured

from pipeline.output.manifest import read_manifest
from pipeline.reader.arrays import iter_batches
from transforms.read.type_names import parse_type

TYPES = [
    pa.int8(), pa.uint64(), pa.float16(), pa.float64(), pa.bool_(), pa.null(), pa.string(),
    pa.large_string(), pa.binary(), pa.large_binary(), pa.string_view(), pa.binary(16),
    pa.date32(), pa.date64(), pa.time32("s"), pa.time32("ms"), pa.time64("us"),
    pa.time64("ns"), pa.duration("s"), pa.duration("ns"), pa.timestamp("s"),
    pa.timestamp("ms", "UTC"), pa.timestamp("us", "Europe/Paris"), pa.timestamp("ns", "+01:00"),
    pa.decimal32(7, 2), pa.decimal64(18, 0), pa.decimal128(38, 10), pa.decimal256(76, 38),
    pa.list_(pa.int64()), pa.large_list(pa.string()), pa.list_(pa.int32(), 4),
    pa.list_(pa.list_(pa.list_(pa.float32()))), pa.list_(pa.field("element", pa.int64(), False)),
    pa.map_(pa.string(), pa.int64()), pa.map_(pa.int32(), pa.list_(pa.float64()), True),
    pa.map_(pa.string(), pa.map_(pa.string(), pa.struct([("x", pa.int8())]))),
    pa.struct([]), pa.struct([("x", pa.int64()), ("y", pa.list_(pa.string()))]),
    pa.struct([("a b", pa.int8()), ("c", pa.struct([("d", pa.timestamp("ms", "UTC"))]))]),
    pa.list_(pa.struct([("v", pa.list_(pa.int64())), ("w", pa.binary(4))])),
    pa.dictionary(pa.int32(), pa.string()), pa.dictionary(pa.int8(), pa.int64(), True),
]  # fmt: skip


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_what_pyarrow_prints_reads_back_as_the_same_type(t):
    assert parse_type(str(t)) == t


def test_short_spellings():
    assert parse_type("list<int64>") == pa.list_(pa.int64())
    assert parse_type("fixed_size_list<int32>[3]") == pa.list_(pa.int32(), 3)
    xy = pa.struct([("x", pa.int64()), ("y", pa.string())])
    assert parse_type(" struct< x : int64 , y:string>") == xy
    assert parse_type("double") == pa.float64() and parse_type("date32") == pa.date32()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("strng", "unknown type 'strng' at character 0"),
        ("list<", "the text ends early at character 5"),
        ("map<string>", "expected ',' at character 10"),
        ("list<int64>>", "unexpected text after the type at character 11"),
        ("timestamp[h]", "unit 'h' is not one of"),
        ("decimal128(40, 2)", "precision"),
        ("fixed_size_binary[-1]", "expected a size"),
        ("__import__('os').system('true')", "unknown type '__import__'"),
    ],
)
def test_what_is_not_a_type_says_where_it_stopped(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_type(text)


def _convert(tmp_path: Path, source: Path, config: str, name: str = "out"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(config, encoding="utf-8")
    out = tmp_path / name
    return run_cli_captured(["convert", "--input", source, "--output", out, "--config", path]), out


def test_json_lines_read_in_nested_configured_types(tmp_path):
    source = tmp_path / "t.jsonl"
    rows = [
        {"id": 0, "tags": ["a", None], "p": {"x": 1}, "ts": "2026-01-01T00:00:00", "d": "1.50"},
        {"id": 1, "tags": None, "p": None, "ts": None, "d": None},
        {"id": 2, "tags": [], "p": {"x": -2, "y": [0.5]}, "ts": "1970-01-01T00:00:01", "d": "0"},
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = (
        "columns:\n"
        "  tags: {type: 'list<large_string>'}\n"
        "  p: {type: 'struct<x: int16, y: list<double>>'}\n"  # a field no line of the sample has
        "  ts: {type: 'timestamp[ms, tz=UTC]'}\n"
        "  d: {type: 'decimal128(10, 2)'}\n"
    )
    result, out = _convert(tmp_path, source, config)
    assert result.code == 0, result.err
    types = {f.name: f.spec.source_type for f in read_manifest(str(out)).features}
    assert types["p.x"] == "int16" and types["p.y"] == "list<item: double>"
    assert types["ts"] == "timestamp[ms, tz=UTC]" and types["d"] == "decimal128(10, 2)"
    (batch,) = list(iter_batches(str(out), batch_size=10))
    order = batch["id"].argsort()
    assert batch["p.x"][order].tolist() == [1, 0, -2]
    assert batch["p.x__present"][order].tolist() == [True, False, True]
    assert batch["p.y"].tolist() == [[], [], [0.5]]
    assert batch["ts"][order].tolist() == [1_767_225_600_000, 0, 1_000]
    assert batch["d"][order].tolist() == [b"1.50", b"", b"0.00"]
    assert batch["tags"].tolist() == [[b"a", b""], [], []]
    result, _ = _convert(tmp_path, source, "columns:\n  p: {type: 'map<string, int64>'}\n", "map")
    assert result.code == 2
    assert "columns.p.type: map<string, int64>: pyarrow's JSON reader converts no JSON object" in (
        result.err
    )
    result, _ = _convert(tmp_path, source, "columns:\n  tags: {type: 'list<strng>'}\n", "bad")
    assert result.code == 2
    assert "columns.tags.type: 'list<strng>': unknown type 'strng' at character 5" in result.err


def test_parquet_columns_cast_to_nested_configured_types(tmp_path):
    """Files written over months: one with list<int32> and a struct of one field, one with
    list<int64> and a struct of two; `columns.<name>.type` reads both in the wider types."""
    folder = tmp_path / "in"
    folder.mkdir()
    old = pa.table({"v": pa.array([[1, None], None], pa.list_(pa.int32())),
                    "s": pa.array([{"a": 1}, None], pa.struct([("a", pa.int32())]))})  # fmt: skip
    new_s = pa.struct([("a", pa.int64()), ("b", pa.string())])
    new = pa.table({"v": pa.array([[2**40]], pa.list_(pa.int64())),
                    "s": pa.array([{"a": 2**40, "b": "x"}], new_s)})  # fmt: skip
    pq.write_table(old, folder / "a.parquet")
    pq.write_table(new, folder / "b.parquet")
    config = (
        "schema: unify\n"
        "columns:\n"
        "  v: {type: 'list<int64>'}\n"
        "  s: {type: 'struct<a: int64, b: string>'}\n"
    )
    result, out = _convert(tmp_path, folder / "*.parquet", config)
    assert result.code == 0, result.err
    got = {k: v.tolist() for k, v in next(iter_batches(str(out), batch_size=10)).items()}
    assert sorted(map(tuple, got["v"])) == [(), (1, 0), (2**40,)]
    assert sorted(got["s.a"]) == [0, 1, 2**40] and sorted(got["s.b"]) == [b"", b"", b"x"]
