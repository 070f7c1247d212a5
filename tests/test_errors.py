"""Bad inputs: each fails with its documented error, the message names what it must (file, row,
column, type, key), the CLI exits non-zero, and a failed job writes no manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from pipeline.job.config import ConfigError, load_config
from transforms.encode.schema import SchemaError
from transforms.read.delimited.reader import CsvOptions
from transforms.read.files import InputError
from transforms.read.inputs import input_schema, match_inputs

EXIT_FAILED, EXIT_USAGE = 1, 2


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("tfrecord-etl: error:")]
    assert lines, f"no error line in stderr:\n{err}"
    return lines[-1]


def fails(capsys, args, code: int) -> str:
    """Run the CLI, expect exit `code` and no manifest; return the error line."""
    out = Path(args[args.index("--output") + 1])
    assert run_cli(["convert", *args]) == code
    assert not (out / "manifest.json").exists()
    captured = capsys.readouterr()
    assert "rows:" not in captured.out  # no summary for a failed job
    return error_line(captured.err)


def error_records(out: Path) -> list[dict]:
    """Every dead-letter record in `out/_errors/`, by source and row."""
    rows = [
        json.loads(line)
        for path in sorted((out / "_errors").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    return sorted(rows, key=lambda r: (r["source"], r["row"] if r["row"] is not None else -1))


# ----------------------------------------------------------------------------- plan time


def test_parquet_files_with_different_schemas(tmp_path, capsys):
    a, b = tmp_path / "part-a.parquet", tmp_path / "part-b.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": ["x", "y"]}), a)
    pq.write_table(pa.table({"id": [1.5, 2.5], "v": ["x", "y"]}), b)
    line = fails(
        capsys,
        ["--input", str(tmp_path / "*.parquet"), "--output", str(tmp_path / "o")],
        EXIT_USAGE,
    )
    assert str(a) in line and str(b) in line
    assert "'id'" in line and "int64" in line and "double" in line
    with pytest.raises(SchemaError, match=r"part-a\.parquet.*part-b\.parquet"):
        input_schema([str(a), str(b)], "parquet", CsvOptions())


def test_parquet_files_with_different_columns(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1]}), a)
    pq.write_table(pa.table({"id": [1], "extra": [2]}), b)
    line = fails(capsys, ["--input", str(a), str(b), "--output", str(tmp_path / "o")], EXIT_USAGE)
    assert str(a) in line and str(b) in line and "extra" in line


def test_glob_matching_nothing(tmp_path, capsys):
    pattern = str(tmp_path / "nothing-here-*.parquet")
    line = fails(capsys, ["--input", pattern, "--output", str(tmp_path / "o")], EXIT_USAGE)
    assert pattern in line and "no file matches" in line
    with pytest.raises(InputError, match="no file matches"):
        match_inputs([pattern])


def test_options_on_a_map_name_its_leaves(tmp_path, capsys):
    """Every type Parquet holds has a mapping now (unions and intervals, which have none,
    cannot be written to Parquet: tests/test_columns_types.py); options on a map, which are
    its leaves' to take, are a one-line error naming them."""
    path = tmp_path / "odd.parquet"
    attrs = pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))
    pq.write_table(pa.table({"ok": [1, 2], "attrs": attrs}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns:\n  attrs: {null_policy: fail}\n", encoding="utf-8")
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_USAGE)
    assert "column 'attrs': options apply to leaves, not to a struct or a map" in line
    assert "['attrs.key', 'attrs.value']" in line


def test_unknown_config_key(tmp_path, capsys):
    config = tmp_path / "job.yaml"
    config.write_text("compresion: gzip\n", encoding="utf-8")
    args = ["--input", "x.parquet", "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_USAGE)
    assert str(config) in line and "'compresion'" in line and "unknown" in line


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("columns:\n  fare:\n    nul_policy: fail\n", "'columns.fare.nul_policy'"),
        ("csv:\n  delim: ';'\n", "'csv.delim'"),
        ("columns:\n  fare: 3\n", "'columns.fare'"),
        ("columns:\n  fare:\n    null_policy: never\n", "'columns.fare.null_policy'"),
    ],
    ids=["column-option", "csv-option", "column-not-mapping", "bad-null-policy"],
)
def test_bad_nested_config_key(tmp_path, text, key):
    config = tmp_path / "job.yaml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(str(config), {"input": ["x"], "output": "o"})
    assert str(config) in str(err.value)
    assert key in str(err.value)


def test_config_default_of_the_wrong_type(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": pa.array([1, None], pa.int64())}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns:\n  n: {null_policy: default, default: none}\n", encoding="utf-8")
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_USAGE)
    assert "column 'n'" in line and "'none'" in line and "int64" in line


def test_config_names_a_column_that_does_not_exist(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": [1]}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns:\n  fare: {null_policy: fail}\n", encoding="utf-8")
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_USAGE)
    assert "'fare'" in line


def test_csv_unparsable_value_in_typed_column_in_the_sampled_block(tmp_path, capsys):
    # The configured type stands; the bad row is dead-lettered at run time, then fails the job.
    path = tmp_path / "trips.csv"
    lines = ["name,n"] + [f"r{i},{i}" for i in range(20)]
    lines[11] = "r10,ten"  # data row 10
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text("csv:\n  column_types: {n: int64}\n", encoding="utf-8")
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_FAILED)
    assert str(path) in line
    assert "row 10" in line and "column 'n'" in line and "'ten'" in line
    (errors,) = error_records(tmp_path / "o")
    assert (errors["row"], errors["column"], errors["values"]) == (
        10,
        "n",
        {"name": "r10", "n": "ten"},
    )


def test_nested_list_with_no_value_in_its_first_batch_needs_a_shape(tmp_path, capsys):
    path = tmp_path / "grid.parquet"
    pq.write_table(pa.table({"grid": pa.array([None, None], pa.list_(pa.list_(pa.int64())))}), path)
    line = fails(capsys, ["--input", str(path), "--output", str(tmp_path / "o")], EXIT_USAGE)
    assert "'grid'" in line and "shape" in line


def test_existing_output_without_overwrite(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": [1, 2]}), path)
    out = tmp_path / "out"
    out.mkdir()
    manifest = out / "manifest.json"
    manifest.write_text('{"manifest_version": 1, "splits": {}}', encoding="utf-8")
    assert run_cli(["convert", "--input", path, "--output", out]) == EXIT_USAGE
    line = error_line(capsys.readouterr().err)
    assert str(out) in line and "--overwrite" in line
    assert manifest.read_text(encoding="utf-8") == '{"manifest_version": 1, "splits": {}}'
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]


def test_missing_input_flag(tmp_path, capsys):
    assert run_cli(["convert", "--output", tmp_path / "o"]) == EXIT_USAGE
    assert "--input is required" in error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- run time


def test_null_in_a_list_is_no_bad_row(tmp_path):
    """A null element is a value of the list (docs/types.md, "Nulls and zeros"): written, not
    a bad row; tests/test_nulls_in_lists.py reads such nulls back."""
    values: list = [[i] for i in range(3000)]
    values[2500] = [1, None]  # a null element, in the third row group
    path = tmp_path / "big.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(3000)), "count": pa.array(values, pa.list_(pa.int64()))}),
        path,
        row_group_size=1000,
    )
    out = tmp_path / "o"
    args = ["--input", str(path), "--output", str(out), "--batch-rows", "300"]
    assert run_cli(["convert", *args]) == 0
    assert error_records(out) == []
    features = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["features"]
    (count,) = [f for f in features if f["name"] == "count"]
    assert count["inner_nulls"] == {"1": 1}


def test_nested_list_with_wrong_shape_in_a_later_row(tmp_path, capsys):
    grids = [[[i, i], [i, i]] for i in range(1000)]
    grids[700] = [[1, 2], [3, 4], [5, 6]]  # 3x2 where the first batch says 2x2
    path = tmp_path / "grid.parquet"
    pq.write_table(pa.table({"grid": pa.array(grids, pa.list_(pa.list_(pa.int32())))}), path)
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--batch-rows", "100"]
    line = fails(capsys, args, EXIT_FAILED)
    assert str(path) in line
    assert "row 700" in line and "column 'grid'" in line
    assert "[2, 2]" in line
    assert [(e["row"], e["column"]) for e in error_records(tmp_path / "o")] == [(700, "grid")]


def test_null_under_null_policy_fail(tmp_path, capsys):
    fares = [float(i) for i in range(2000)]
    fares[1234] = None
    path = tmp_path / "fares.parquet"
    pq.write_table(pa.table({"fare": pa.array(fares), "id": pa.array(range(2000))}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns:\n  fare: {null_policy: fail}\n", encoding="utf-8")
    args = [
        "--input",
        str(path),
        "--output",
        str(tmp_path / "o"),
        "--config",
        str(config),
        "--batch-rows",
        "500",
    ]
    line = fails(capsys, args, EXIT_FAILED)
    assert str(path) in line
    assert "row 1234" in line and "column 'fare'" in line and "null" in line
    assert [(e["row"], e["column"]) for e in error_records(tmp_path / "o")] == [(1234, "fare")]


def test_csv_unparsable_value_after_the_sampled_block(tmp_path, capsys):
    path = tmp_path / "late.csv"
    lines = ["n,s"] + [f"{i},row {i}" for i in range(3000)]
    lines[2601] = "many,row 2600"  # data row 2600, far past the first block
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        "csv:\n  column_types: {n: int64}\n  infer_bytes: 4096\n  block_bytes: 4096\n",
        encoding="utf-8",
    )
    args = ["--input", str(path), "--output", str(tmp_path / "o"), "--config", str(config)]
    line = fails(capsys, args, EXIT_FAILED)
    assert str(path) in line
    assert "row 2600" in line and "column 'n'" in line and "'many'" in line
    assert [(e["row"], e["column"]) for e in error_records(tmp_path / "o")] == [(2600, "n")]
