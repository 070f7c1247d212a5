"""A Parquet file's row groups read one work item at a time (transforms/read/parquet_reader.py,
`row_group_file`): its footer parsed once a process, not once a row group, and parsed again when
the file changes; past MAX_ITEMS_PER_FILE row groups, runs of consecutive row groups as one item
(transforms/read/work.py); the rows of every item as the file holds them; whole runs of files of
many small row groups equal to their source."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import read_output, run_cli_captured

import transforms.read.parquet_reader as parquet_reader
import transforms.read.work as work
from transforms.read.files import InputError
from transforms.read.work import plan_work, read_work_item


def _table(n: int, offset: int = 0) -> pa.Table:
    ids = np.arange(offset, offset + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5, "s": pa.array([f"r{i}" for i in ids])})


@pytest.fixture(name="counted")
def counted_fixture(monkeypatch):
    """The footer parses of `row_group_file` (its calls of `parquet_file`), counted."""
    calls: list[str] = []
    parse = parquet_reader.parquet_file

    def counting(path, metadata=None):
        if metadata is None:
            calls.append(path)
        return parse(path, metadata)

    monkeypatch.setattr(parquet_reader, "parquet_file", counting)
    monkeypatch.setattr(parquet_reader, "_footers", {})
    return calls


def _read_all(items, schema) -> list[int]:
    ids: list[int] = []
    for item in items:
        for batch in read_work_item(item, "parquet", schema, None, 7):
            assert batch.first_row == batch.table.column("id")[0].as_py()  # rows from 0
            ids += batch.table.column("id").to_pylist()
    return ids


def test_the_footer_is_parsed_once_for_every_row_group(tmp_path, counted):
    path = str(tmp_path / "groups.parquet")
    pq.write_table(_table(300), path, row_group_size=10)
    items = plan_work([path], "parquet")
    assert len(items) == 30
    schema = _table(1).schema
    assert _read_all(items, schema) == list(range(300))
    assert counted == [path]  # one parse for 30 items
    assert _read_all(items, schema) == list(range(300))  # read again: still kept
    assert counted == [path]


def test_a_changed_file_is_parsed_again(tmp_path, counted):
    path = str(tmp_path / "groups.parquet")
    pq.write_table(_table(40), path, row_group_size=10)
    schema = _table(1).schema
    assert _read_all(plan_work([path], "parquet"), schema) == list(range(40))
    pq.write_table(_table(60, offset=1000), path, row_group_size=20)
    os.utime(path, ns=(1, 1))  # a new modification time even on a coarse clock
    items = plan_work([path], "parquet")
    ids: list[int] = []
    for item in items:
        for batch in read_work_item(item, "parquet", schema, None, 100):
            ids += batch.table.column("id").to_pylist()
    assert ids == list(range(1000, 1060))
    assert counted == [path, path]


def test_only_the_last_few_footers_are_kept(tmp_path, counted):
    paths = []
    for k in range(parquet_reader.FOOTERS_KEPT + 2):
        paths.append(str(tmp_path / f"f{k}.parquet"))
        pq.write_table(_table(20, offset=100 * k), paths[-1], row_group_size=10)
    schema = _table(1).schema
    items = plan_work(paths, "parquet")
    ids: list[int] = []
    for item in items:
        for batch in read_work_item(item, "parquet", schema, None, 100):
            ids += batch.table.column("id").to_pylist()
    assert ids == [100 * k + i for k in range(len(paths)) for i in range(20)]
    assert counted == paths  # each file once
    assert len(parquet_reader._footers) == parquet_reader.FOOTERS_KEPT


def test_an_objects_footer_is_not_kept(tmp_path, counted, monkeypatch):
    """An object rewritten in place gives no cheap mark of change: its footer is read for each
    item (here a local file taken for an object)."""
    monkeypatch.setattr(parquet_reader, "is_local", lambda path: False)
    path = str(tmp_path / "object.parquet")
    pq.write_table(_table(30), path, row_group_size=10)
    items = plan_work([path], "parquet")
    assert _read_all(items, _table(1).schema) == list(range(30))
    assert counted == [path] * 3
    assert parquet_reader._footers == {}


def test_a_file_gone_between_items_is_named(tmp_path, counted):
    path = str(tmp_path / "gone.parquet")
    pq.write_table(_table(20), path, row_group_size=10)
    first, second = plan_work([path], "parquet")
    schema = _table(1).schema
    assert _read_all([first], schema) == list(range(10))
    os.unlink(path)
    with pytest.raises(InputError, match=r"gone\.parquet: cannot read as Parquet"):
        _read_all([second], schema)


def test_up_to_the_limit_one_item_a_row_group(tmp_path, monkeypatch):
    monkeypatch.setattr(work, "MAX_ITEMS_PER_FILE", 12)
    path = str(tmp_path / "groups.parquet")
    pq.write_table(_table(120), path, row_group_size=10)
    items = plan_work([path], "parquet")
    assert [(w.row_group, w.row_groups, w.first_row, w.num_rows) for w in items] == [
        (g, 1, 10 * g, 10) for g in range(12)
    ]


def test_past_the_limit_runs_of_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(work, "MAX_ITEMS_PER_FILE", 4)
    monkeypatch.setattr(work, "RUN_ROWS", 25)
    path = str(tmp_path / "groups.parquet")
    pq.write_table(_table(125), path, row_group_size=10)  # 12 groups of 10, one of 5
    items = plan_work([path], "parquet")
    # a run ends at 32 rows (125 / 4, above RUN_ROWS): 4 groups, 40 rows
    assert [(w.row_group, w.row_groups, w.first_row, w.num_rows) for w in items] == [
        (0, 4, 0, 40),
        (4, 4, 40, 40),
        (8, 4, 80, 40),
        (12, 1, 120, 5),
    ]
    total = pq.ParquetFile(path).metadata
    assert items[0].source_bytes == sum(total.row_group(g).total_byte_size for g in range(4))
    assert _read_all(items, _table(1).schema) == list(range(125))
    monkeypatch.setattr(work, "RUN_BYTES", 1)  # a run ends at its bytes too
    assert [w.row_groups for w in plan_work([path], "parquet")] == [1] * 13


@pytest.mark.parametrize(
    ("rows", "group_rows", "items"),
    [(750, 3, 250), (5000, 2, 1)],  # below the limit: an item a row group; past it: runs
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_run_of_a_file_of_many_small_row_groups(tmp_path, workers, rows, group_rows, items):
    assert (rows // group_rows <= work.MAX_ITEMS_PER_FILE) == (items > 1)
    path = tmp_path / "small_groups.parquet"
    pq.write_table(_table(rows), path, row_group_size=group_rows)
    planned = run_cli_captured(["plan", "--input", path, "--output", tmp_path / "out"])
    assert f"{items:,} work item(s)" in planned.out
    out = tmp_path / "out"
    result = run_cli_captured(["convert", "--input", path, "--output", out, "--workers", workers])
    assert result.code == 0, result.err
    records = sorted(read_output(out), key=lambda r: r["id"][0])
    assert records == [{"id": [i], "x": [i * 0.5], "s": [f"r{i}".encode()]} for i in range(rows)]


def test_an_empty_row_group_starts_no_item(tmp_path, monkeypatch):
    path = str(tmp_path / "empty-groups.parquet")
    table = _table(30)
    with pq.ParquetWriter(path, table.schema) as writer:
        writer.write_table(table.slice(0, 10))
        writer.write_table(table.slice(10, 0))
        writer.write_table(table.slice(10, 20))
    groups = pq.ParquetFile(path).metadata
    assert [groups.row_group(g).num_rows for g in range(groups.num_row_groups)] == [10, 0, 20]
    items = plan_work([path], "parquet")
    assert [(w.row_group, w.row_groups, w.first_row, w.num_rows) for w in items] == [
        (0, 1, 0, 10),
        (2, 1, 10, 20),
    ]
    assert _read_all(items, table.schema) == list(range(30))
    monkeypatch.setattr(work, "MAX_ITEMS_PER_FILE", 1)  # a run may hold an empty row group
    items = plan_work([path], "parquet")
    assert _read_all(items, table.schema) == list(range(30))
