"""A table of file references (`files:`) cut by rows into work items (transforms/read/work.py
`cut_reference_tables`: byte ranges of a local, uncompressed table, `slice_by_rows` for any
other), so several workers read its files: the items read together give the rows and the bad
rows of the whole file, each once, with their row numbers; the job writes the same records at 1
and 2 workers, on Beam, and from the table gzipped (cut by row numbers), each row once, each bad
file once in `_errors/`.

And the statistics' XXH64 (transforms/hashing.py `xxh64_range`), which hashes a bytes feature's
long values: equal to the reference XXH64 on known vectors, at every byte alignment."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from conftest import read_manifest, run_cli_captured

from transforms.hashing import word_views, xxh64_range
from transforms.read.delimited.reader import CsvOptions
from transforms.read.work import (
    REFERENCE_ROWS,
    WorkItem,
    cut_reference_tables,
    read_work_item,
    slice_by_rows,
)
from transforms.stats.values import LONG_VALUE, count_values

# -- slice_by_rows --------------------------------------------------------------------------


def test_slices_cover_the_file_and_share_its_bytes() -> None:
    whole = WorkItem("refs.csv", None, 0, None, 1001)
    group = WorkItem("t.parquet", 0, 0, 50, 400)
    items = slice_by_rows([whole, group], lambda _: 100, rows_per_item=30)
    assert items[-1] == group  # a row group is never cut
    slices = items[:-1]
    assert [s.rows for s in slices] == [(0, 25), (25, 50), (50, 75), (75, None)]
    assert sum(s.source_bytes for s in slices) == 1001
    assert all(s.path == "refs.csv" and s.row_group is None for s in slices)
    assert slice_by_rows([whole], lambda _: 10, rows_per_item=30) == [whole]  # one slice: whole
    assert len(slice_by_rows([whole], lambda _: 10**9)) == 32  # at most MAX_REFERENCE_SLICES


def _table_with_bad_rows(root: Path, fmt: str) -> tuple[Path, pa.Schema]:
    """100 data rows; rows 13 and 61 have the wrong number of fields (CSV) or are not JSON;
    rows 40 and 87 hold a value that does not convert to int64."""
    lines = []
    for i in range(100):
        n = "x" if i in (40, 87) else str(i)
        if fmt == "csv":
            lines.append(f"{n},f{i}.png,extra" if i in (13, 61) else f"{n},f{i}.png")
        else:
            row = json.dumps({"id": n, "ref": f"f{i}.png"})
            lines.append("{not json" if i in (13, 61) else row)
    path = root / f"refs.{fmt}"
    head = ["id,ref"] if fmt == "csv" else []
    path.write_text("\n".join(head + lines) + "\n", encoding="utf-8")
    kind = pa.int64() if fmt == "csv" else pa.string()
    return path, pa.schema([("id", kind), ("ref", pa.string())])


def _read(item: WorkItem, fmt: str, schema: pa.Schema, batch_rows: int) -> tuple[list, list]:
    bad: list[dict] = []
    rows = []
    for batch in read_work_item(item, fmt, schema, CsvOptions(), batch_rows, on_bad=bad.append):
        numbers = (
            batch.rows.tolist()
            if batch.rows is not None
            else list(range(batch.first_row, batch.first_row + batch.table.num_rows))
        )
        rows += list(zip(numbers, batch.table.to_pylist(), strict=True))
    return rows, sorted((b["row"], b["stage"]) for b in bad)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("rows_per_item", [7, 30, 99])
def test_slices_read_the_rows_and_bad_rows_of_the_whole_once(tmp_path, fmt, rows_per_item):
    path, schema = _table_with_bad_rows(tmp_path, fmt)
    whole = WorkItem(str(path), None, 0, None, path.stat().st_size)
    expected_rows, expected_bad = _read(whole, fmt, schema, 5)
    assert len(expected_rows) + len(expected_bad) == 100  # the oracle itself: every row once
    # an estimate of 90 rows: the last slice reads past it to the end
    slices = slice_by_rows([whole], lambda _: 90, rows_per_item=rows_per_item)
    assert len(slices) == -(-90 // rows_per_item)
    got_rows, got_bad = [], []
    for item in slices:
        rows, bad = _read(item, fmt, schema, 5)
        start, stop = item.rows or (0, None)
        assert all(start <= n < (stop or 10**9) for n, _ in rows)
        got_rows += rows
        got_bad += bad
    assert got_rows == expected_rows
    assert sorted(got_bad) == expected_bad


def _captioned(root: Path, fmt: str, rows: int) -> Path:
    """`rows` references, every 7th with a caption holding a quoted line break and a comma."""
    if fmt == "csv":
        lines = ["id,ref,caption"] + [
            f'{i},img/{i}.png,"line one, of {i}\nline two"' if i % 7 == 3 else f"{i},img/{i}.png,"
            for i in range(rows)
        ]
    else:
        lines = [
            json.dumps({"id": i, "ref": f"img/{i}.png", "caption": "a\nb" if i % 7 == 3 else None})
            for i in range(rows)
        ]
    path = root / f"captioned.{fmt}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_local_table_is_cut_into_byte_ranges_of_about_the_rows(tmp_path, fmt):
    path = _captioned(tmp_path, fmt, 1000)
    schema = pa.schema([("id", pa.int64()), ("ref", pa.string()), ("caption", pa.string())])
    whole = WorkItem(str(path), None, 0, None, path.stat().st_size)
    # an estimate of 900 rows: it decides how many ranges (9), not their rows
    items = cut_reference_tables([whole], fmt, CsvOptions(), lambda _: 900, rows_per_item=100)
    assert len(items) == 9
    assert all(item.part is not None and item.rows is None for item in items)
    assert [item.first_row for item in items] == [0, *np.cumsum([i.num_rows for i in items])[:-1]]
    assert sum(item.num_rows for item in items) == 1000
    assert all(60 <= item.num_rows <= 140 for item in items)  # about 1000 / 9 each
    expected, _ = _read(whole, fmt, schema, 64)
    got = []
    for item in items:
        rows, bad = _read(item, fmt, schema, 64)
        assert not bad and len(rows) == item.num_rows
        assert [n for n, _ in rows] == list(range(item.first_row, item.first_row + item.num_rows))
        got += rows
    assert got == expected


def test_a_compressed_table_is_cut_by_row_numbers(tmp_path):
    path = _captioned(tmp_path, "csv", 1000)
    packed = tmp_path / "captioned.csv.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    item = WorkItem(str(packed), None, 0, None, packed.stat().st_size)
    items = cut_reference_tables([item], "csv", CsvOptions(), lambda _: 1000, rows_per_item=250)
    assert [i.rows for i in items] == [(0, 250), (250, 500), (500, 750), (750, None)]
    assert all(i.part is None for i in items)
    one = WorkItem(str(path), None, 0, None, path.stat().st_size)  # one item: left whole
    assert cut_reference_tables([one], "csv", CsvOptions(), lambda _: 100) == [one]


# -- the job ----------------------------------------------------------------------------------

ROWS = 2 * REFERENCE_ROWS + 500  # three slices


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> Path:
    """ROWS rows over 40 small documents; every 97th row names a missing file."""
    root = tmp_path_factory.mktemp("refs")
    (root / "docs").mkdir()
    for k in range(40):
        (root / "docs" / f"{k}.txt").write_bytes(f"document {k} ".encode() * (k + 1))
    lines = ["id,doc"] + [
        f"{i},docs/{'missing' if i % 97 == 5 else i % 40}.txt" for i in range(ROWS)
    ]
    (root / "refs.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "refs.csv.gz").write_bytes(gzip.compress((root / "refs.csv").read_bytes()))
    (root / "job.yaml").write_text(json.dumps({"files": {"doc": {}}, "max_bad_rows": 1000}))
    return root


def _convert(root: Path, out: Path, *args: str, table: str = "refs.csv") -> dict:
    result = run_cli_captured(
        ["convert", "--input", root / table, "--output", out, "--config", root / "job.yaml",
         "--compression", "none", *args]
    )  # fmt: skip
    assert result.code == 0, result.err
    return read_manifest(out)


def _records(out: Path) -> list[bytes]:
    files = sorted(str(p) for p in out.glob("train-*"))
    return list(tf.data.TFRecordDataset(files).as_numpy_iterator())


def _errors(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("_errors/*")) for line in p.open()]


def test_one_csv_of_references_is_read_by_every_worker(references, tmp_path):
    plan = run_cli_captured(
        ["plan", "--input", references / "refs.csv", "--output", tmp_path / "p",
         "--config", references / "job.yaml", "--json"]
    )  # fmt: skip
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["work"]["work_items"] == 3

    one = _convert(references, tmp_path / "one", "--workers", "1")
    two = _convert(references, tmp_path / "two", "--workers", "2")
    beam = _convert(references, tmp_path / "beam", "--engine", "beam")
    packed = _convert(references, tmp_path / "packed", "--workers", "2", table="refs.csv.gz")
    missing = [i for i in range(ROWS) if i % 97 == 5]
    for manifest in (one, two, beam, packed):
        assert manifest["rows"] == ROWS - len(missing)
        assert manifest["bad_rows"]["count"] == len(missing)
    assert _records(tmp_path / "one") == _records(tmp_path / "two")  # the same bytes, in order
    assert _records(tmp_path / "packed") == _records(tmp_path / "one")  # cut by row numbers
    assert collections.Counter(_records(tmp_path / "beam")) == collections.Counter(
        _records(tmp_path / "one")
    )
    for out in ("one", "two", "beam", "packed"):
        errors = _errors(tmp_path / out)
        assert sorted(e["row"] for e in errors) == missing  # each bad row once, its own number
        assert all("file not found" in e["reason"] for e in errors)

    rows = {}
    for record in _records(tmp_path / "two"):
        example = tf.train.Example.FromString(record)
        i = example.features.feature["id"].int64_list.value[0]
        rows[i] = example.features.feature["doc"].bytes_list.value[0]
    assert len(rows) == ROWS - len(missing)
    for i, doc in rows.items():
        assert doc == (references / "docs" / f"{i % 40}.txt").read_bytes()


# -- XXH64 --------------------------------------------------------------------------------------

# XXH64 with seed 0, as the reference implementation (the `xxhash` package) gives them.
VECTORS = [
    (b"", 0xEF46DB3751D8E999),
    (b"a", 0xD24EC4F1A98C6E5B),
    (b"abc", 0x44BC2CF5AD770999),
    (b"0123456789abcdef0123456789abcdef!", 0x8AFFF4DAAC4E677E),
    (bytes(range(256)) * 3 + b"xyz", 0xE921A1B45BD779F8),
]


@pytest.mark.parametrize("value,expected", VECTORS)
def test_xxh64_equals_the_reference_at_every_alignment(value, expected):
    for shift in range(8):
        buf = np.frombuffer(b"\x07" * shift + value + b"\x09" * 5, np.uint8)
        got = xxh64_range(word_views(buf), buf, shift, shift + len(value))
        assert int(got) == expected, shift


def test_long_bytes_values_are_counted_as_before():
    """Distinct long values counted with XXH64: the same counts and lengths, and a value's hash
    does not depend on where it lies in the buffer."""
    rng = np.random.default_rng(3)
    blobs = [rng.bytes(int(n)) for n in rng.integers(LONG_VALUE, 5000, 50)]
    values = [blobs[int(k)] for k in rng.integers(0, 50, 400)] + [b"short", b"short"]
    arr = pa.array(values, pa.binary())
    counted = count_values(arr, keep_values=False)
    expected = collections.Counter(values)
    assert sorted(counted.counts.tolist()) == sorted(expected.values())
    assert counted.length_sum == sum(len(v) for v in values)
    again = count_values(pa.array(values[::-1], pa.binary()), keep_values=False)
    assert set(again.hashes.tolist()) == set(counted.hashes.tolist())
