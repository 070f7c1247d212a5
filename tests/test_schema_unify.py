"""Datasets whose schema evolved across files (`schema: unify`, transforms/read/unify.py) and
`columns.<name>.type` on Parquet columns: the unified schema (types widened, a column a file
lacks null there) in the plan and the manifest; Parquet, CSV and JSON Lines converted on both
engines and read back by both readers equal to the source; the errors (types that cannot be
unified, a cast that fails) on one line naming the files and the column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import read_output, run_cli_captured
from test_reader_arrays import assert_readers_agree

from pipeline.output.manifest import read_manifest
from pipeline.reader import load_dataset
from transforms.encode.schema import SchemaError
from transforms.read.unify import conform, unify_schemas

BATCH = 32
LOC_A = pa.struct([("lat", pa.float32())])
LOC_B = pa.struct([("lat", pa.float64()), ("lon", pa.float64())])


def _files(root: Path) -> dict[str, list]:
    """Three files written over time: a (first), b (id and x widened, score widened, a column
    added, one dropped, a struct field added), c (old narrow id, most columns gone). Returns
    the expected rows per unified column (None: null)."""
    a_ids, b_ids, c_ids = range(0, 40), range(40, 100), range(100, 110)
    a = pa.table(
        {
            "id": pa.array(a_ids, pa.int32()),
            "x": pa.array([i / 4 for i in a_ids], pa.float32()),
            "name": pa.array([f"a{i}" if i % 5 else None for i in a_ids]),
            "score": pa.array([i - 20 for i in a_ids], pa.int16()),
            "loc": pa.array([{"lat": i / 2} for i in a_ids], LOC_A),
        }
    )
    b = pa.table(
        {
            "id": pa.array(b_ids, pa.int64()),
            "x": pa.array([i / 3 for i in b_ids], pa.float64()),
            "score": pa.array([2**40 + i for i in b_ids], pa.int64()),
            "loc": pa.array([{"lat": i / 2, "lon": -i / 8} for i in b_ids], LOC_B),
            "extra": pa.array([f"e{i}" for i in b_ids]),
        }
    )
    c = pa.table({"id": pa.array(c_ids, pa.int16()), "name": pa.array([f"c{i}" for i in c_ids])})
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(a, root / "a.parquet")
    pq.write_table(b, root / "b.parquet", row_group_size=25)
    pq.write_table(c, root / "c.parquet")
    nones = lambda n: [None] * n  # noqa: E731
    return {
        "id": list(range(110)),
        "x": [float(np.float32(i / 4)) for i in a_ids] + [i / 3 for i in b_ids] + nones(10),
        "name": a.column("name").to_pylist() + nones(60) + c.column("name").to_pylist(),
        "score": [i - 20 for i in a_ids] + [2**40 + i for i in b_ids] + nones(10),
        "loc.lat": [i / 2 for i in a_ids] + [i / 2 for i in b_ids] + nones(10),
        "loc.lon": nones(40) + [-i / 8 for i in b_ids] + nones(10),
        "extra": nones(40) + [f"e{i}" for i in b_ids] + nones(10),
    }


UNIFIED = {
    "id": "int64",
    "x": "double",
    "name": "string",
    "score": "int64",
    "loc": "struct<lat: double, lon: double>",
    "extra": "string",
}
DTYPES = {"id": "int64", "x": "float64", "name": "string", "score": "int64"}
DTYPES |= {"loc.lat": "float64", "loc.lon": "float64", "extra": "string"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, dict[str, list]]:
    root = tmp_path_factory.mktemp("unify") / "lake"
    return root, _files(root)


def convert(out: Path, source: Path, *flags: str, config: dict | None = None):
    args = ["convert", "--input", source, "--output", out, "--batch-rows", "16", *flags]
    if config is not None:
        path = Path(str(out) + ".yaml")
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", path]
    return run_cli_captured(args)


def collect(out: Path) -> dict[str, np.ndarray]:
    parts: dict[str, list] = {}
    for batch in load_dataset(str(out), batch_size=BATCH):
        for name, value in batch.items():
            parts.setdefault(name, []).append(value.numpy())
    merged = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    order = np.argsort(merged["id"], kind="stable")
    return {name: values[order] for name, values in merged.items()}


def check(got: dict[str, np.ndarray], expected: dict[str, list]) -> None:
    for name, values in expected.items():
        present = [v is not None for v in values]
        if name == "id":
            assert got[name].tolist() == values
            continue
        assert got[name + "__present"].tolist() == present, name
        zero = "" if DTYPES[name] == "string" else 0
        want = [zero if v is None else v for v in values]
        if DTYPES[name] == "string":
            want = [w.encode() for w in want]
        elif DTYPES[name] == "float64" and name != "score":
            want = [float(np.float32(w)) for w in want]  # float64 is written as float32
        assert got[name].dtype == np.dtype(object if DTYPES[name] == "string" else DTYPES[name])
        assert got[name].tolist() == want, name


def test_strict_is_the_default_and_names_both_files(dataset, tmp_path):
    root, _ = dataset
    result = convert(tmp_path / "o", root)
    assert result.code != 0
    (line,) = [x for x in result.err.splitlines() if "error:" in x]
    assert "a.parquet and " in line and "do not have the same schema" in line


@pytest.mark.parametrize("engine", ["in-process", "beam"])
def test_unify_round_trip(dataset, tmp_path, engine):
    root, expected = dataset
    out = tmp_path / "out"
    result = convert(out, root, "--schema", "unify", "--engine", engine)
    assert result.code == 0, result.err
    assert json.loads(result.out.strip().splitlines()[-1])["engine"] == engine
    manifest = read_manifest(str(out))
    assert manifest.input_schema == {
        "mode": "unify",
        "columns": UNIFIED,
        "missing": {
            str(root / "a.parquet"): ["extra"],
            str(root / "b.parquet"): ["name"],
            str(root / "c.parquet"): ["x", "score", "loc", "extra"],
        },
    }
    assert manifest.config["schema"] == "unify"
    assert {f.name: f.spec.dtype for f in manifest.features} == DTYPES
    assert manifest.rows == 110
    check(collect(out), expected)
    assert assert_readers_agree(out) == 110
    verified = run_cli_captured(["verify", out, "--source", root])
    assert verified.code == 0, verified.out + verified.err


def test_plan_shows_the_unified_schema_and_what_each_file_lacks(dataset):
    root, _ = dataset
    result = run_cli_captured(
        ["plan", "--input", root, "--output", root / "o", "--schema", "unify"]
    )
    assert result.code == 0, result.err
    columns = ", ".join(f"{k} {v}" for k, v in UNIFIED.items())
    assert f"schema: unified from 3 file(s): {columns}" in result.out
    assert f"{root / 'c.parquet'} lacks x, score, loc, extra (null there)" in result.out
    assert f"{root / 'a.parquet'} lacks extra (null there)" in result.out


def test_types_that_cannot_be_unified_name_both_files_and_the_column(tmp_path):
    pq.write_table(pa.table({"k": [1], "v": ["text"]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"k": [2], "v": pa.array([5], pa.int64())}), tmp_path / "b.parquet")
    result = convert(tmp_path / "o", tmp_path / "*.parquet", "--schema", "unify")
    assert result.code == 2
    (line,) = [x for x in result.err.splitlines() if "error:" in x]
    assert "column 'v': string in " in line and str(tmp_path / "a.parquet") in line
    assert f"int64 in {tmp_path / 'b.parquet'} cannot be unified" in line
    assert not (tmp_path / "o").exists()


def test_a_column_type_fixes_the_type_over_the_files(tmp_path):
    """`columns.<name>.type` on a Parquet column: the files' values cast to it (strict or
    unify), the manifest's dtype that type."""
    pq.write_table(
        pa.table({"k": pa.array([1, 2], pa.int64()), "v": [10, 20]}), tmp_path / "a.parquet"
    )
    pq.write_table(pa.table({"k": pa.array([3], pa.int8()), "v": [30]}), tmp_path / "b.parquet")
    config = {"columns": {"k": {"type": "string"}, "v": {"type": "int16"}}}
    result = convert(tmp_path / "o", tmp_path / "*.parquet", "--schema", "unify", config=config)
    assert result.code == 0, result.err
    features = {f.name: f.spec for f in read_manifest(str(tmp_path / "o")).features}
    assert (features["k"].dtype, features["v"].dtype) == ("string", "int16")
    got = collect_by(tmp_path / "o", "v")
    assert got["k"].tolist() == [b"1", b"2", b"3"] and got["v"].tolist() == [10, 20, 30]
    strict = convert(tmp_path / "s", tmp_path / "a.parquet", config=config)
    assert strict.code == 0, strict.err
    assert collect_by(tmp_path / "s", "v")["k"].tolist() == [b"1", b"2"]
    unknown = convert(
        tmp_path / "u", tmp_path / "a.parquet", config={"columns": {"z": {"type": "int8"}}}
    )
    assert unknown.code == 2 and "columns.z.type: 'z' is not a column of the input" in unknown.err


def collect_by(out: Path, key: str) -> dict[str, np.ndarray]:
    (batch,) = list(load_dataset(str(out), batch_size=1000))
    values = {name: v.numpy() for name, v in batch.items() if not isinstance(v, tf.RaggedTensor)}
    order = np.argsort(values[key], kind="stable")
    return {name: v[order] for name, v in values.items()}


def test_a_cast_that_fails_names_the_file_rows_and_column(tmp_path):
    """int64 and uint64 unify to int64 (pyarrow's rule): a uint64 past int64 cannot be cast;
    the job fails naming the file, its rows and the column."""
    pq.write_table(pa.table({"n": pa.array([1], pa.int64())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": pa.array([2, 2**63], pa.uint64())}), tmp_path / "b.parquet")
    result = convert(tmp_path / "o", tmp_path / "*.parquet", "--schema", "unify")
    assert result.code == 1
    (line,) = [x for x in result.err.splitlines() if "error:" in x]
    assert f"{tmp_path / 'b.parquet'}: rows 0-1: column 'n': cannot cast uint64 to int64" in line


@pytest.mark.parametrize("engine", ["in-process", "beam"])
def test_unify_csv_files_of_other_columns_and_orders(tmp_path, engine):
    """CSV: each file's header and inferred types, unified; a file's columns in any order; a
    csv.column_types entry for a column only some files have."""
    root = tmp_path / "csv"
    root.mkdir()
    (root / "a.csv").write_text("id,x,name\n0,1,a0\n1,2,\n", encoding="utf-8")
    (root / "b.csv").write_text("name,id,x,extra\nb2,2,2.5,7\n,3,-1,\n", encoding="utf-8")
    (root / "c.csv").write_text("id\n4\n", encoding="utf-8")
    config = {"csv": {"column_types": {"extra": "string"}}}
    out = tmp_path / "out"
    result = convert(out, root, "--schema", "unify", "--engine", engine, config=config)
    assert result.code == 0, result.err
    manifest = read_manifest(str(out))
    assert manifest.input_schema["columns"] == {
        "id": "int64",
        "x": "double",
        "name": "string",
        "extra": "string",
    }
    assert manifest.input_schema["missing"] == {
        str(root / "a.csv"): ["extra"],
        str(root / "c.csv"): ["x", "name", "extra"],
    }
    got = collect_by(out, "id")
    assert got["id"].tolist() == [0, 1, 2, 3, 4]
    assert got["x"].tolist() == [1.0, 2.0, 2.5, -1.0, 0.0]
    assert got["x__present"].tolist() == [True, True, True, True, False]
    assert got["name"].tolist() == [b"a0", b"", b"b2", b"", b""]
    assert got["name__present"].tolist() == [True, False, True, False, False]
    assert got["extra"].tolist() == [b"", b"", b"7", b"", b""]
    assert got["extra__present"].tolist() == [False, False, True, False, False]
    assert assert_readers_agree(out) == 5
    verified = run_cli_captured(["verify", out, "--source", root])
    assert verified.code == 0, verified.out + verified.err


def test_unify_json_lines(tmp_path):
    root = tmp_path / "jsonl"
    root.mkdir()
    (root / "a.jsonl").write_text('{"id": 0, "x": 1}\n{"id": 1, "x": 2}\n', encoding="utf-8")
    (root / "b.jsonl").write_text('{"id": 2, "x": 2.5, "tag": "t"}\n', encoding="utf-8")
    out = tmp_path / "out"
    result = convert(out, root, "--schema", "unify")
    assert result.code == 0, result.err
    manifest = read_manifest(str(out))
    assert manifest.input_schema["columns"] == {"id": "int64", "x": "double", "tag": "string"}
    assert manifest.input_schema["missing"] == {str(root / "a.jsonl"): ["tag"]}
    got = collect_by(out, "id")
    assert got["x"].tolist() == [1.0, 2.0, 2.5]
    assert got["tag"].tolist() == [b"", b"", b"t"]
    assert got["tag__present"].tolist() == [False, False, True]
    strict = convert(tmp_path / "strict", root)  # strict: the first file's types
    assert (
        strict.code == 1 and "b.jsonl: row 0: column 'x': line 1: cannot convert 2.5" in strict.err
    )


def test_unify_schemas_and_conform_directly():
    a = pa.schema([("i", pa.int8()), ("f", pa.float32())])
    b = pa.schema([("f", pa.float64()), ("i", pa.int32()), ("t", pa.timestamp("ms"))])
    unified = unify_schemas(["a", "b"], [a, b])
    assert unified.schema == pa.schema(
        [("i", pa.int32()), ("f", pa.float64()), ("t", pa.timestamp("ms"))]
    )
    assert unified.missing == {"a": ("t",)}
    table = pa.table({"f": pa.array([0.5, None], pa.float32()), "i": pa.array([1, -1], pa.int8())})
    got = conform(table, unified.schema, "a", 0)
    assert got.schema == unified.schema
    assert got.to_pydict() == {"i": [1, -1], "f": [0.5, None], "t": [None, None]}
    with pytest.raises(SchemaError, match=r"column 'x': bool in a and int64 in b"):
        unify_schemas(["a", "b"], [pa.schema([("x", pa.bool_())]), pa.schema([("x", pa.int64())])])


@pytest.mark.parametrize("schema", ["strict", "unify"])
def test_two_columns_of_one_name_fail_the_plan_naming_the_file(tmp_path, schema):
    csv_path = tmp_path / "dup.csv"
    csv_path.write_text("a,a,b\n1,2,3\n", encoding="utf-8")
    parquet_path = tmp_path / "dup.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array([1]), pa.array([2])], ["x", "x"]), parquet_path)
    for path, hint in ((csv_path, " (or give csv.column_names)"), (parquet_path, "")):
        result = run_cli_captured(
            ["convert", "--input", path, "--output", tmp_path / "out", "--schema", schema]
        )
        assert result.code == 2
        name = "a" if path == csv_path else "x"
        assert f"{path}: more than one column is named '{name}': rename them in the file{hint}" in (
            result.err
        )
    config = tmp_path / "names.yaml"
    config.write_text("csv:\n  column_names: [a1, a2, b]\n", encoding="utf-8")
    out = tmp_path / "renamed"
    result = run_cli_captured(
        ["convert", "--config", config, "--input", csv_path, "--output", out, "--schema", schema]
    )
    assert result.code == 0, result.err
    assert read_output(out) == [{"a1": [1], "a2": [2], "b": [3]}]
