"""`tfrecord-etl plan`: what convert would read and write, from the plan alone; nothing written.
Its figures against the footers, the files on disk and the runs of convert with the same flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE_CSV, SAMPLE_PARQUET, read_manifest, run_cli_captured


def plan(*args) -> dict:
    result = run_cli_captured(["plan", *args, "--json"])
    assert result.code == 0, result.err
    return json.loads(result.out)


def tree(path: Path) -> dict[str, int]:
    """Every file under `path` with its size (the mtime of a rewrite could tie)."""
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def test_parquet_figures_from_the_footers(tmp_path):
    out = tmp_path / "out"
    summary = plan("--input", SAMPLE_PARQUET, "--output", out)
    meta = pq.read_metadata(SAMPLE_PARQUET)
    read = summary["read"]
    assert read == {
        "format": "parquet",
        "files": 1,
        "row_groups": meta.num_row_groups,
        "rows": 2000,
        "rows_exact": True,
        "bytes": os.path.getsize(SAMPLE_PARQUET),
        "passes": 1,
    }
    assert summary["work"]["work_items"] == meta.num_row_groups
    write = summary["write"]
    assert write["output"] == str(out) and write["write"] == "rolling"
    assert write["splits"]["train"]["rows"] == 2000 and write["splits"]["train"]["shards"] == 1
    assert not out.exists()  # nothing written, not even the directory


def test_rolling_estimate_against_the_run(tmp_path):
    """Small shards of two splits: the files each split gets, as the run then writes them, and
    the bytes within a quarter."""
    config = tmp_path / "job.yaml"
    config.write_text("splits: {train: 8, eval: 2}\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["--config", config, "--input", SAMPLE_CSV, "--output", out, "--shard-mb", "0.05"]
    summary = plan(*args)
    assert summary["write"]["write"] == "rolling"
    splits = summary["write"]["splits"]
    assert splits["train"]["shards"] > 1
    result = run_cli_captured(["convert", *args])
    assert result.code == 0, result.err
    manifest = read_manifest(out)
    for name in ("train", "eval"):
        assert len(manifest["splits"][name]["files"]) == splits[name]["shards"], name
    written = sum(p.stat().st_size for p in out.glob("*.tfrecord.gz"))
    estimated = summary["write"]["bytes"]
    assert abs(estimated - written) <= written / 4, (estimated, written)


def test_splits_and_num_shards(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("splits: {train: 8, eval: 2}\nnum_shards: 3\n", encoding="utf-8")
    summary = plan("--config", config, "--input", SAMPLE_PARQUET, "--output", tmp_path / "o")
    splits = summary["write"]["splits"]
    assert list(splits) == ["train", "eval"]
    assert splits["train"]["rows"] == 1600 and splits["eval"]["rows"] == 400
    assert splits["train"]["shards"] == 3 and splits["eval"]["shards"] == 3
    assert summary["write"]["write"] == "grouped"
    total = summary["write"]["bytes"]
    assert abs(splits["train"]["bytes"] - 4 * splits["eval"]["bytes"]) <= 4
    assert abs(splits["train"]["bytes"] + splits["eval"]["bytes"] - total) <= 2


def test_csv_rows_are_estimated(tmp_path):
    summary = plan("--input", SAMPLE_CSV, "--output", tmp_path / "o")
    read = summary["read"]
    assert read["format"] == "csv" and read["row_groups"] is None
    assert read["rows_exact"] is False
    assert 1800 <= read["rows"] <= 2200  # from the bytes per row of the first MiBs


def test_many_row_groups_and_files_the_text(tmp_path):
    table = pa.table({"id": range(1000), "name": [f"n{i}" for i in range(1000)]})
    for i in range(3):
        pq.write_table(table, tmp_path / f"part-{i}.parquet", row_group_size=250)
    out = tmp_path / "out"
    result = run_cli_captured(["plan", "--input", tmp_path / "*.parquet", "--output", out])
    assert result.code == 0, result.err
    text = result.out
    assert "3 parquet file(s), 12 row group(s), 3,000 rows" in text
    assert "12 work item(s)" in text
    assert "nothing was written" in text
    assert not out.exists()


def test_plan_deletes_nothing_of_an_existing_output(tmp_path):
    """convert --overwrite would clear it; plan with the same flags leaves every byte."""
    out = tmp_path / "out"
    result = run_cli_captured(["convert", "--input", SAMPLE_PARQUET, "--output", out])
    assert result.code == 0, result.err
    (out / "train-00000-of-00009.tfrecord.gz").write_bytes(b"left by an unfinished run")
    before = tree(out)
    summary = plan("--input", SAMPLE_PARQUET, "--output", out, "--overwrite")
    assert summary["read"]["rows"] == 2000
    assert tree(out) == before


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--input", "nope/*.parquet"], "no file matches this input"),
        (["--input", str(SAMPLE_PARQUET), "--date", "2026-02-30"], "--date '2026-02-30'"),
    ],
)
def test_user_errors(tmp_path, args, text):
    result = run_cli_captured(["plan", *args, "--output", tmp_path / "o"])
    assert result.code == 2
    assert result.err.startswith("tfrecord-etl: error: ") and text in result.err
    assert result.out == ""
    assert not (tmp_path / "o").exists()


def test_the_engine_convert_would_use(tmp_path):
    out = str(tmp_path / "out")
    base = ["--input", SAMPLE_PARQUET, "--output", out]
    engine = plan(*base)["engine"]
    assert engine["name"] == "in-process" and engine["why"] == "this process, without Beam"
    assert engine["workers"] == len(os.sched_getaffinity(0))
    assert "the cores this process may use" in engine["workers_why"]
    assert plan(*base, "--workers", "3")["engine"]["workers"] == 3
    assert plan(*base, "--num-shards", "2")["engine"]["name"] == "in-process"
    sink = plan(*base, "--sink", "tfrecordio", "--compression", "none")["engine"]
    assert sink["name"] == "beam" and "tfrecordio" in sink["why"]
    assert plan(*base, "--runner=FnApiRunner")["engine"]["why"] == "Beam options given"
    text = run_cli_captured(["plan", *base, "--engine", "beam"])
    assert "engine: beam (--engine beam)" in text.out.splitlines()
    refused = run_cli_captured(
        ["plan", *base, "--engine", "in-process", "--sink", "tfrecordio", "--compression", "none"]
    )
    assert refused.code == 2 and "cannot run this job" in refused.err


def test_fewer_work_items_than_workers_is_said(tmp_path):
    """A work item goes whole to one worker: `plan` says how many of the workers read and
    convert, and what gives more (more files; smaller row groups)."""
    out = str(tmp_path / "out")
    csv = plan("--input", SAMPLE_CSV, "--output", out, "--workers", "3")["engine"]
    assert (csv["workers"], csv["busy_workers"]) == (3, 1)  # one CSV file: one work item
    text = run_cli_captured(["plan", "--input", SAMPLE_CSV, "--output", out, "--workers", "3"])
    assert (
        "        at most 1 of them read and convert: a small, compressed or remote CSV file is "
        "one work item (a smaller csv.range_bytes, or the input cut into more files, uses more "
        "cores)"
    ) in text.out.splitlines()
    config = tmp_path / "ranges.yaml"  # the file cut into byte ranges: a work item each
    config.write_text("csv: {range_bytes: 20000}\n", encoding="utf-8")
    ranged = plan("--input", SAMPLE_CSV, "--output", out, "--workers", "3", "--config", config)
    assert ranged["work"]["work_items"] > 3 and ranged["engine"]["busy_workers"] == 3
    one_group = tmp_path / "one.parquet"
    pq.write_table(pa.table({"a": list(range(10))}), one_group)
    text = run_cli_captured(["plan", "--input", one_group, "--output", out, "--workers", "2"])
    assert "a Parquet row group is one work item" in text.out
    many = plan("--input", SAMPLE_PARQUET, "--output", out, "--workers", "2")["engine"]
    assert many["busy_workers"] == 2
    text = run_cli_captured(["plan", "--input", SAMPLE_PARQUET, "--output", out, "--workers", "2"])
    assert "of them read and convert" not in text.out
