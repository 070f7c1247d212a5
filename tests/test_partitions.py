"""Hive-partitioned inputs (transforms/read/partitions.py): the `key=value` directories of a
file's path as typed columns. Unit tests of the keys, their types, the matching of directories
and filters; then whole runs: a partitioned directory (files of one partition with different
row-group layouts) gives the source rows plus the partition columns, usable as a split key and
in transforms; a glob filter and a `{date}` template read only their partitions; gs:// on the
storage emulator."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from apache_beam.io.filesystems import FileSystems
from conftest import canonical, example_to_dict, read_manifest, reference_rows, run_cli_captured

from pipeline.job.config import load_config
from pipeline.job.plan import plan_job
from pipeline.reader import load_dataset
from transforms.encode.schema import ColumnOptions, SchemaError
from transforms.read.delimited.reader import CsvOptions
from transforms.read.inputs import match_input_files
from transforms.read.partitions import (
    PartitionColumns,
    add_partition_fields,
    infer_partition_type,
    partition_segments,
    plan_partitions,
)
from transforms.read.work import plan_whole_files, read_work_item, with_partitions

# ----------------------------------------------------------------------------- the keys


def test_segments_are_the_key_value_directories():
    path = "gs://b/trips/date=2026-12-01/region=eu%20west/part=3.parquet"
    assert partition_segments(path) == [("date", "2026-12-01"), ("region", "eu%20west")]
    assert partition_segments("data/part-0.parquet") == []


def test_values_are_decoded_and_the_hive_null_is_null():
    paths = [
        "t/date=2026-12-01/region=eu%20west/a.parquet",
        "t/date=2026-12-02/region=__HIVE_DEFAULT_PARTITION__/b.parquet",
    ]
    parts = plan_partitions(paths, {})
    assert parts.names == ("date", "region")
    assert [f.type for f in parts.fields] == [pa.string(), pa.string()]
    assert parts.values[paths[0]] == (("date", "2026-12-01"), ("region", "eu west"))
    assert parts.values[paths[1]] == (("date", "2026-12-02"), ("region", None))
    assert plan_partitions(["t/a.parquet", "t/b.parquet"], {}) is None


@pytest.mark.parametrize(
    "values, expected",
    [
        (["1", "22", "-3"], pa.int64()),
        ([None, "5"], pa.int64()),
        (["007", "7"], pa.string()),  # a leading zero is text: 007 is not 7
        (["+7"], pa.string()),
        (["99999999999999999999"], pa.string()),  # beyond int64: an identifier, not a float
        (["1.5", "2"], pa.float64()),
        (["1e3"], pa.float64()),
        (["2026-12-01"], pa.string()),  # dates stay text (a split key); type: date32 if wanted
        (["eu", "1"], pa.string()),
        ([None], pa.string()),
        (["true", "false"], pa.string()),
    ],
)
def test_type_inference(values, expected):
    assert infer_partition_type(values) == expected


def test_types_over_every_file():
    paths = ["t/n=1/a.parquet", "t/n=2/b.parquet", "t/n=2.5/c.parquet"]
    parts = plan_partitions(paths, {})
    assert parts.fields[0].type == pa.float64()
    assert [parts.values[p][0][1] for p in paths] == [1.0, 2.0, 2.5]


def test_configured_type_wins_and_a_bad_value_names_the_file():
    paths = ["t/date=2026-12-01/h=01/a.parquet", "t/date=2026-12-02/h=23/b.parquet"]
    parts = plan_partitions(paths, {"date": pa.date32(), "h": pa.int8()})
    assert [f.type for f in parts.fields] == [pa.date32(), pa.int8()]
    assert parts.values[paths[0]] == (("date", datetime.date(2026, 12, 1)), ("h", 1))
    bad = [*paths, "t/date=yesterday/h=2/c.parquet"]
    with pytest.raises(SchemaError, match=r"t/date=yesterday/h=2/c.parquet: partition "):
        plan_partitions(bad, {"date": pa.date32()})
    with pytest.raises(SchemaError, match=r"date='yesterday': cannot convert to date32"):
        plan_partitions(bad, {"date": pa.date32()})


def test_files_must_have_the_same_keys():
    paths = ["t/date=1/region=eu/a.parquet", "t/date=1/b.parquet"]
    with pytest.raises(SchemaError, match=r"t/date=1/region=eu/a.parquet and t/date=1/b.parquet"):
        plan_partitions(paths, {})
    with pytest.raises(SchemaError, match=r"same partition keys: \['region', 'date'\] vs"):
        plan_partitions(["t/region=eu/date=1/a.parquet", "t/date=1/region=eu/b.parquet"], {})


def test_a_key_that_is_also_a_column_is_an_error():
    parts = plan_partitions(["t/id=1/a.parquet"], {})
    with pytest.raises(SchemaError, match=r"t/id=1/a.parquet: partition key 'id' is also a column"):
        add_partition_fields(pa.schema([("id", pa.int64())]), parts, "t/id=1/a.parquet")


def test_partition_columns_are_slices_of_one_array():
    schema = pa.schema([("x", pa.int64()), ("date", pa.string()), ("n", pa.int64())])
    columns = PartitionColumns(schema, (("date", "2026-12-01"), ("n", None)))
    big = columns.append_to(pa.table({"x": pa.array(range(5), pa.int64())}))
    small = columns.append_to(pa.table({"x": pa.array([7], pa.int64())}))
    assert big.schema == small.schema == schema
    assert big.column("date").to_pylist() == ["2026-12-01"] * 5
    assert big.column("n").null_count == 5
    assert small.to_pylist() == [{"x": 7, "date": "2026-12-01", "n": None}]
    # the smaller batch shares the first batch's buffers: no copy per batch
    assert small.column("date").chunk(0).buffers()[2].address == (
        big.column("date").chunk(0).buffers()[2].address
    )


# ----------------------------------------------------------------------------- matching


def _touch(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_a_directory_stands_for_its_files_hidden_ones_left_out(tmp_path):
    root = tmp_path / "t"
    _touch(
        root,
        "date=2026-12-01/region=eu/a.parquet",
        "date=2026-12-01/region=us/b.parquet",
        "date=2026-12-02/region=eu/c.parquet",
        "date=2026-11-30/region=eu/d.parquet",
        "_SUCCESS",
        "date=2026-12-01/.a.parquet.crc",
        "date=2026-12-01/_temporary/0/e.parquet",
    )
    rel = lambda files: sorted(p.removeprefix(f"{root}/") for p in files)  # noqa: E731
    assert rel(match_input_files([str(root)])) == [
        "date=2026-11-30/region=eu/d.parquet",
        "date=2026-12-01/region=eu/a.parquet",
        "date=2026-12-01/region=us/b.parquet",
        "date=2026-12-02/region=eu/c.parquet",
    ]
    assert rel(match_input_files([f"{root}/"])) == rel(match_input_files([str(root)]))
    assert rel(match_input_files([f"{root}/date=2026-12-*"])) == [
        "date=2026-12-01/region=eu/a.parquet",
        "date=2026-12-01/region=us/b.parquet",
        "date=2026-12-02/region=eu/c.parquet",
    ]
    assert rel(match_input_files([f"{root}/date=2026-12-*/region=eu/"])) == [
        "date=2026-12-01/region=eu/a.parquet",
        "date=2026-12-02/region=eu/c.parquet",
    ]
    # a file named explicitly is read even with a hidden-looking name
    assert rel(match_input_files([f"{root}/_SUCCESS"])) == ["_SUCCESS"]


def test_whole_file_work_items_carry_their_partition(tmp_path):
    """Very many files: one work item per whole file (footer not read at plan time)."""
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    paths = []
    for n in (1, 2):
        folder = tmp_path / f"n={n}"
        folder.mkdir()
        pq.write_table(table, folder / "a.parquet", row_group_size=2)
        paths.append(str(folder / "a.parquet"))
    parts = plan_partitions(paths, {})
    schema = add_partition_fields(table.schema, parts, paths[0])
    work = with_partitions(plan_whole_files(dict.fromkeys(paths, 1)), parts)
    rows = [
        r
        for item in work
        for b in read_work_item(item, "parquet", schema, CsvOptions(), 2)
        for r in b.table.to_pylist()
    ]
    assert rows == [{"x": x, "n": n} for n in (1, 2) for x in (1, 2, 3)]


def test_partitioned_csv_with_a_bad_row(tmp_path):
    for day, text in (("1", "id,s\n1,a\n2\n3,c\n"), ("2", "id,s\n4,d\n")):
        (tmp_path / f"day={day}").mkdir()
        (tmp_path / f"day={day}" / "a.csv").write_text(text, encoding="utf-8")
    config = load_config(None, {"input": [str(tmp_path)], "output": str(tmp_path / "out")})
    plan = plan_job(config)
    assert plan.schema.names == ["id", "s", "day"]
    bad: list[dict] = []
    batches = [
        b
        for item in plan.work
        for b in read_work_item(item, plan.fmt, plan.schema, config.csv, 100, bad.append)
    ]
    rows = [r for b in batches for r in b.table.to_pylist()]
    assert rows == [
        {"id": 1, "s": "a", "day": 1},
        {"id": 3, "s": "c", "day": 1},
        {"id": 4, "s": "d", "day": 2},
    ]
    assert [(b["row"], b["values"]) for b in bad] == [(1, {"text": "2"})]


def test_a_type_on_a_column_that_is_no_key(tmp_path):
    """A Parquet column's type: the planned schema has it (tests/test_schema_unify.py runs it);
    a CSV column's type is csv.column_types' to set."""
    pq.write_table(pa.table({"x": [1]}), tmp_path / "a.parquet")
    (tmp_path / "a.csv").write_text("x\n1\n", encoding="utf-8")
    for name in ("a.parquet", "a.csv"):
        config = load_config(None, {"input": [str(tmp_path / name)], "output": str(tmp_path / "o")})
        config = dataclasses.replace(config, columns={"x": ColumnOptions(type="int32")})
        if name == "a.csv":
            with pytest.raises(SchemaError, match=r"columns.x.type: a CSV column's type is set"):
                plan_job(config)
        else:
            assert plan_job(config).schema.field("x").type == pa.int32()


# ----------------------------------------------------------------------------- whole runs

DAYS = ("2026-12-01", "2026-12-02", "2026-12-03")
REGIONS = ("eu", "us")


ROWS_PER_PART = 30


def _source() -> dict[tuple[str, str], pa.Table]:
    """(date, region) -> the rows of that partition (id unique over all)."""
    rng = np.random.default_rng(16)
    parts, start = {}, 0
    for date in DAYS:
        for region in REGIONS:
            n = ROWS_PER_PART
            fare = rng.uniform(0, 50, n).round(2)
            parts[date, region] = pa.table(
                {
                    "id": pa.array(np.arange(start, start + n), pa.int64()),
                    "fare": pa.array(fare, pa.float64(), mask=np.arange(n) % 7 == 0),
                    "name": pa.array([f"r{i}" if i % 5 else None for i in range(n)], pa.string()),
                }
            )
            start += n
    return parts


def _write_hive(root, parts) -> None:
    """Two files per partition, with different row-group layouts."""
    for (date, region), table in parts.items():
        folder = root / f"date={date}" / f"region={region}"
        folder.mkdir(parents=True)
        third = table.num_rows // 3
        pq.write_table(table.slice(0, third), folder / "part-0.parquet", row_group_size=4)
        pq.write_table(table.slice(third), folder / "part-1.parquet", row_group_size=1000)


def _expected(parts, keep=lambda date, region: True) -> collections.Counter:
    rows = []
    for (date, region), table in parts.items():
        if keep(date, region):
            for row in reference_rows(table):
                rows.append({**row, "date": [date.encode()], "region": [region.encode()]})
    return collections.Counter(map(canonical, rows))


def _records(output) -> collections.Counter:
    manifest = read_manifest(output)
    files = [str(output / f) for s in manifest["splits"].values() for f in s["files"]]
    data = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
    return collections.Counter(
        canonical(example_to_dict(tf.train.Example.FromString(r))) for r in data.as_numpy_iterator()
    )


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    root = tmp_path_factory.mktemp("hive") / "trips"
    parts = _source()
    _write_hive(root, parts)
    (root / "_SUCCESS").write_bytes(b"")
    return root, parts


def _convert(*args):
    result = run_cli_captured(["convert", *args])
    assert result.code == 0, result.err
    return result


def test_partitioned_directory_split_by_a_key_and_filtered_by_one(hive, tmp_path):
    root, parts = hive
    config = tmp_path / "job.yaml"
    config.write_text(
        "splits: {train: 1, eval: 1}\n"
        "split_key: region\n"
        "transforms:\n"
        "  - filter: {expr: \"date != '2026-12-02'\"}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    _convert("--input", root, "--output", out, "--config", config, "--batch-rows", "16")
    assert _records(out) == _expected(parts, lambda date, region: date != "2026-12-02")
    manifest = read_manifest(out)
    features = {f["name"]: f for f in manifest["features"]}
    assert features["date"]["source_type"] == "string"
    assert features["region"]["source_type"] == "string"
    # the split is a hash of the region alone: each region lands wholly in one split
    for split in ("train", "eval"):
        regions = collections.Counter()
        for batch in load_dataset(str(out), split=split, batch_size=64):
            regions.update(v.decode() for v in batch["region"].numpy())
        assert all(n == 2 * ROWS_PER_PART for n in regions.values()), (split, regions)
    assert manifest["rows"] == 4 * ROWS_PER_PART


def test_date_template_with_a_configured_type(hive, tmp_path):
    root, parts = hive
    config = tmp_path / "job.yaml"
    config.write_text("columns: {date: {type: date32}}\n", encoding="utf-8")
    out = tmp_path / "out-{date}"
    result = _convert(
        "--input",
        f"{root}/date={{date}}",
        "--output",
        out,
        "--date",
        "2026-12-03",
        "--config",
        config,
    )
    assert '"date":"2026-12-03"' in result.out
    day = tmp_path / "out-2026-12-03"
    features = {f["name"]: f for f in read_manifest(day)["features"]}
    assert features["date"]["source_type"] == "date32[day]"
    days = (datetime.date(2026, 12, 3) - datetime.date(1970, 1, 1)).days
    expected = collections.Counter(
        canonical({**row, "date": [days], "region": [region.encode()]})
        for (date, region), table in parts.items()
        if date == "2026-12-03"
        for row in reference_rows(table)
    )
    assert _records(day) == expected
    seen = collections.Counter()
    for batch in load_dataset(str(day), batch_size=50):
        seen.update(batch["date"].numpy().tolist())
        seen.update(v.decode() for v in batch["region"].numpy())
    assert seen == {days: 2 * ROWS_PER_PART, "eu": ROWS_PER_PART, "us": ROWS_PER_PART}
    # verify derives the records again from the files the run read: the same partition columns
    verified = run_cli_captured(["verify", day, "--source"])
    assert verified.code == 0, verified.out + verified.err


def test_partitioned_input_on_an_object_store(hive, tmp_path):
    from gcs_emulator import GcsEmulator

    root, parts = hive
    with GcsEmulator(("bucket",)) as gcs, gcs.environ():
        for path in sorted(root.rglob("*.parquet")):
            name = f"gs://bucket/trips/{path.relative_to(root)}"
            with open(path, "rb") as f, FileSystems.create(name) as g:
                g.write(f.read())
        out = tmp_path / "out"
        _convert("--input", "gs://bucket/trips/date=2026-12-0[23]/region=eu", "--output", out)
        # JSON Lines on the object store, partitioned, a bad line read again line by line
        lines = b'{"v": 1}\n{"v": 2\n{"v": 3}\n'
        with FileSystems.create("gs://bucket/events/day=7/a.jsonl") as g:
            g.write(lines)
        events = tmp_path / "events"
        _convert("--input", "gs://bucket/events", "--output", events, "--max-bad-rows", "1")
    keep = lambda date, region: date != "2026-12-01" and region == "eu"  # noqa: E731
    assert _records(out) == _expected(parts, keep)
    assert sorted(_records(events).elements()) == sorted(
        canonical({"v": [v], "day": [7]}) for v in (1, 3)
    )
    (error,) = (events / "_errors").glob("*.jsonl")
    assert json.loads(error.read_text(encoding="utf-8"))["values"] == {
        "line": 2,
        "text": '{"v": 2',
    }
