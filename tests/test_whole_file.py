"""Whole-file faults: each is a clear error naming the file, a non-zero exit, and no manifest
(nothing that looks like a complete output)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli_captured

EXIT_FAILED, EXIT_USAGE = 1, 2
SMALL_BLOCKS = "csv:\n  infer_bytes: 1024\n  block_bytes: 1024\n"


def fails(tmp_path: Path, path: Path, code: int, config: str | None = None) -> str:
    out = tmp_path / "out"
    args = ["convert", "--input", path, "--output", out]
    if config is not None:
        (tmp_path / "job.yaml").write_text(config, encoding="utf-8")
        args += ["--config", tmp_path / "job.yaml"]
    result = run_cli_captured(args)
    assert result.code == code, result.err
    assert not (out / "manifest.json").exists()
    assert "rows:" not in result.out
    (line,) = [x for x in result.err.splitlines() if x.startswith("tfrecord-etl: error:")]
    assert path.name in line or "*" in path.name
    return line


def big_table(rows: int = 100_000) -> pa.Table:
    return pa.table({"a": range(rows), "s": [f"v{i}" for i in range(rows)]})


def test_missing_file(tmp_path):
    assert "no file matches" in fails(tmp_path, tmp_path / "nope.parquet", EXIT_USAGE)


def test_empty_glob(tmp_path):
    assert "no file matches" in fails(tmp_path, tmp_path / "*.parquet", EXIT_USAGE)


def test_truncated_parquet(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(big_table(1000), good)
    path = tmp_path / "truncated.parquet"
    data = good.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "cannot read as Parquet" in fails(tmp_path, path, EXIT_USAGE)


def test_parquet_with_a_corrupt_page(tmp_path):
    path = tmp_path / "corrupt.parquet"
    pq.write_table(big_table(), path, compression="snappy", row_group_size=20_000)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = b"\xab" * 2000
    path.write_bytes(bytes(data))
    assert "after data row" in fails(tmp_path, path, EXIT_FAILED)


def test_unreadable_compressed_csv(tmp_path):
    path = tmp_path / "garbage.csv.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage" * 10)
    assert "cannot read as CSV" in fails(tmp_path, path, EXIT_USAGE)


def test_compressed_csv_corrupt_after_the_first_block(tmp_path):
    text = "n,s\n" + "".join(f"{i},row {i}\n" for i in range(50_000))
    data = bytearray(gzip.compress(text.encode()))
    middle = len(data) // 2
    data[middle : middle + 200] = bytes(200)
    path = tmp_path / "late.csv.gz"
    path.write_bytes(bytes(data))
    assert "after data row" in fails(tmp_path, path, EXIT_FAILED, SMALL_BLOCKS)


def test_zero_row_parquet(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"a": pa.array([], pa.int64())}), path)
    assert "no data row" in fails(tmp_path, path, EXIT_USAGE)


def test_zero_rows_in_many_files_named_on_one_short_line(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(40):
        pq.write_table(pa.table({"a": pa.array([], pa.int64())}), folder / f"part-{i:02}.parquet")
    line = fails(tmp_path, folder / "*.parquet", EXIT_USAGE)
    assert line.endswith(
        f"{folder}/part-00.parquet, {folder}/part-01.parquet, {folder}/part-02.parquet and 37 "
        "more: no data row in the input (nothing to convert)"
    )


@pytest.mark.parametrize("text", ["a,b\n", "a,b\n\n\n"])
def test_header_only_csv(tmp_path, text):
    path = tmp_path / "header.csv"
    path.write_text(text, encoding="utf-8")
    assert "no data row" in fails(tmp_path, path, EXIT_FAILED)


def test_schema_mismatch_between_files(tmp_path):
    pq.write_table(pa.table({"a": [1]}), tmp_path / "one.parquet")
    pq.write_table(pa.table({"a": ["x"]}), tmp_path / "two.parquet")
    line = fails(tmp_path, tmp_path / "*.parquet", EXIT_USAGE)
    assert "one.parquet" in line and "two.parquet" in line and "'a'" in line
