"""The schema-drift gate: --expect-schema PREVIOUS fails before writing anything when a column
disappeared or changed type, and reports new columns."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import read_manifest, run_cli_captured

from pipeline.output.drift import SchemaDriftError, check_drift
from pipeline.output.manifest import StoredFeature
from transforms.encode.schema import plan_features

EXIT_OK, EXIT_USAGE = 0, 2


def convert(path: Path, out: Path, *extra) -> object:
    return run_cli_captured(["convert", "--input", path, "--output", out, *extra])


@pytest.fixture
def previous(tmp_path) -> Path:
    path = tmp_path / "day1.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}), path)
    out = tmp_path / "day1"
    assert convert(path, out).code == EXIT_OK
    return out


def test_same_schema_passes_and_new_columns_are_reported(tmp_path, previous):
    path = tmp_path / "day2.parquet"
    pq.write_table(pa.table({"id": [3], "name": ["c"], "extra": [0.5]}), path)
    for expected in (previous, previous / "manifest.json"):
        out = tmp_path / f"day2-{expected.name}"
        result = convert(path, out, "--expect-schema", expected)
        assert result.code == EXIT_OK, result.err
        assert "new column(s) against" in result.err and "'extra'" in result.err
        assert read_manifest(out)["rows"] == 1


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"id": [3]}), "column 'name' disappeared"),
        (pa.table({"id": pa.array([3], pa.int32()), "name": ["c"]}), "column 'id' changed type"),
        (pa.table({"id": [3], "name": pa.array([b"c"])}), "column 'name' changed type"),
    ],
)
def test_drift_fails_before_writing(tmp_path, previous, table, message):
    path = tmp_path / "day2.parquet"
    pq.write_table(table, path)
    out = tmp_path / "day2"
    result = convert(path, out, "--expect-schema", previous)
    assert result.code == EXIT_USAGE
    assert message in result.err and str(previous) in result.err
    assert not out.exists() or not any(out.iterdir())


def test_check_drift_lists_every_problem():
    old = plan_features(pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float32())]), {})
    new = plan_features(pa.schema([("a", pa.float32()), ("c", pa.float32()), ("d", pa.int8())]), {})
    with pytest.raises(SchemaDriftError) as err:
        check_drift([StoredFeature(s) for s in old], new, "m.json")
    assert "column 'a' changed type: kind 'int64' -> 'float'" in str(err.value)
    assert "column 'b' disappeared" in str(err.value)
    assert check_drift([StoredFeature(s) for s in old[2:]], new[1:], "m.json") == ["d"]


def test_unreadable_expected_schema(tmp_path, previous):
    result = convert(
        previous.parent / "day1.parquet", tmp_path / "o", "--expect-schema", tmp_path / "nope"
    )
    assert result.code == EXIT_USAGE and "cannot read the expected schema" in result.err
