"""Other engines and more workers give the same records as the local runner.

- Beam's portable path (PortableRunner, embedded job server, LOOPBACK workers): the path Flink,
  Spark and Dataflow Runner v2 take (the Runner API pipeline proto, the Fn API to the workers).
- Scale-out: a multi-file input whose largest file has many row groups is planned as one work
  item per row group, and 2 local worker processes write the same records as one.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import (
    SAMPLE_CSV,
    SAMPLE_PARQUET,
    canonical,
    read_manifest,
    read_output,
    read_raw_records,
    reference_rows,
    run_cli_captured,
)

from transforms.read.work import plan_work

PORTABLE = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]
TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def convert(out: Path, *args) -> Path:
    result = run_cli_captured(["convert", "--output", out, *args])
    assert result.code == 0, result.err
    return out


def comparable(manifest: dict) -> dict:
    """The manifest without what legitimately differs between runs (time, shard names, the
    output directory in the config)."""
    out = {k: v for k, v in manifest.items() if k != "created"}
    out["config"] = {k: v for k, v in manifest["config"].items() if k != "output"}
    out["splits"] = {name: s["rows"] for name, s in manifest["splits"].items()}
    return out


def assert_same_output(a: Path, b: Path) -> None:
    """Record for record (as a multiset of serialized records) and manifest for manifest."""
    records_a, records_b = read_raw_records(a), read_raw_records(b)
    assert len(records_a) == len(records_b) > 0
    assert collections.Counter(records_a) == collections.Counter(records_b)
    assert comparable(read_manifest(a)) == comparable(read_manifest(b))


# ----------------------------------------------------------------------------- portable


@pytest.mark.parametrize(
    ("source", "extra"),
    [(SAMPLE_PARQUET, []), (SAMPLE_CSV, ["--num-shards", "2"])],
    ids=["parquet", "csv-2-shards"],
)
def test_portable_runner_writes_the_same_records(tmp_path, source, extra):
    local = convert(tmp_path / "local", "--input", source, *extra)
    portable = convert(tmp_path / "portable", "--input", source, *extra, *PORTABLE)
    assert_same_output(local, portable)
    if extra:
        assert len(read_manifest(portable)["splits"]["train"]["files"]) == 2


def test_portable_runner_failure_exits_1_without_manifest(tmp_path):
    values: list = [[[i]] for i in range(1000)]
    values[900] = [[1, 2]]  # two values where the shape [1, 1] holds one: fails on a worker
    path = tmp_path / "bad.parquet"
    n = pa.array(values, pa.list_(pa.list_(pa.int64())))
    pq.write_table(pa.table({"n": n}), path, row_group_size=250)
    result = run_cli_captured(["convert", "--input", path, "--output", tmp_path / "o", *PORTABLE])
    assert result.code == 1
    assert "row 900" in result.err and "column 'n'" in result.err
    assert not (tmp_path / "o" / "manifest.json").exists()


# ----------------------------------------------------------------------------- scale-out


@pytest.fixture(scope="module")
def split_input(tmp_path_factory) -> tuple[Path, pa.Table]:
    """The sample as 3 files: two small ones (2 row groups each) and a large one (14)."""
    table = pq.read_table(SAMPLE_PARQUET)
    root = tmp_path_factory.mktemp("split-input")
    pq.write_table(table.slice(0, 300), root / "part-0.parquet", row_group_size=150)
    pq.write_table(table.slice(300, 300), root / "part-1.parquet", row_group_size=150)
    pq.write_table(table.slice(600), root / "part-2-large.parquet", row_group_size=100)
    return root, table


def test_work_is_planned_per_row_group(split_input):
    root, _ = split_input
    paths = sorted(str(p) for p in root.glob("*.parquet"))
    work = plan_work(paths, "parquet")
    assert len(work) == 2 + 2 + 14
    large = [w for w in work if w.path.endswith("large.parquet")]
    assert [w.row_group for w in large] == list(range(14))
    assert [w.first_row for w in large] == list(range(0, 1400, 100))
    assert len(plan_work([str(SAMPLE_CSV)] * 2, "csv")) == 2  # CSV: one work item per file


def test_two_worker_processes_write_the_same_records_as_one(split_input, tmp_path):
    root, table = split_input
    args = ["--input", f"{root}/*.parquet", "--batch-rows", "64"]
    one = convert(tmp_path / "one", *args)
    two = convert(tmp_path / "two", *args, *TWO_WORKERS)
    assert_same_output(one, two)
    records = read_output(two)
    assert collections.Counter(map(canonical, records)) == collections.Counter(
        map(canonical, reference_rows(table))
    )
