"""Very many Parquet files: the plan reads the first footer only (one work item per whole file,
its size from the match), the readers read each file's row groups and check its schema.

The thresholds are lowered here so that a few dozen files take that path, locally and on the
storage emulator; the job's records and bad rows must be those of the plan that reads every
footer, and a file with another schema must fail the run naming the first file and itself.
"""

from __future__ import annotations

import collections
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems
from conftest import run_cli_captured

import pipeline.job.plan as plan_module
import transforms.read.parquet_reader as reader_module
from pipeline.job.config import load_config
from pipeline.job.plan import plan_job
from transforms.read.work import WorkItem
from transforms.write.tfrecord import read_records

FILES = 40
BAD_VALUE = [[0, 0]]  # two values where the shape [1, 1] holds one: a bad row (stage "encode")
BAD = {7: [4], 12: [0, 9]}  # file -> its bad rows (file rows; 9 is in its last row group)
ODD_MESSAGE = "do not have the same schema: column 'id': int64 vs int32"


def _table(i: int, rows: int, id_type: pa.DataType | None = None) -> pa.Table:
    ids = np.arange(100 * i, 100 * i + rows)
    n: list = [[[int(v)]] for v in ids]
    for row in BAD.get(i, []):
        n[row] = BAD_VALUE
    return pa.table(
        {
            "id": pa.array(ids, id_type or pa.int64()),
            "name": pa.array([f"n{v}" for v in ids]),
            "n": pa.array(n, pa.list_(pa.list_(pa.int64()))),
        }
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """FILES files of 3 to 12 rows, every third of them in row groups of 4 rows; an odd file
    (id as int32) in a folder of its own."""
    root = tmp_path_factory.mktemp("lazy")
    (root / "good").mkdir()
    (root / "odd").mkdir()
    for i in range(FILES):
        rows = 3 + i % 10 if i not in BAD else 12
        groups = 4 if i % 3 == 0 or i in BAD else None
        pq.write_table(
            _table(i, rows), root / "good" / f"part-{i:05d}.parquet", row_group_size=groups
        )
    pq.write_table(_table(999, 5, pa.int32()), root / "odd" / "odd.parquet")
    return root


@pytest.fixture
def lazy(monkeypatch):
    """Every plan of more than 8 files reads the first footer only, locally and remotely."""
    monkeypatch.setattr(plan_module, "LAZY_FOOTERS_LOCAL", 8)
    monkeypatch.setattr(plan_module, "LAZY_FOOTERS_REMOTE", 8)


@pytest.fixture
def opened(monkeypatch):
    """The paths the Parquet reader opens, and the footers pyarrow reads (calls of
    pq.read_metadata and pq.ParquetFile)."""
    seen: dict[str, list] = {"paths": [], "footers": []}
    open_input, read_metadata, parquet_file = (
        reader_module.open_input,
        pq.read_metadata,
        pq.ParquetFile,
    )

    def counted_open(path):
        seen["paths"].append(path)
        return open_input(path)

    def counted_metadata(*args, **kwargs):
        seen["footers"].append("read_metadata")
        return read_metadata(*args, **kwargs)

    def counted_file(*args, **kwargs):
        seen["footers"].append("ParquetFile")
        return parquet_file(*args, **kwargs)

    monkeypatch.setattr(reader_module, "open_input", counted_open)
    monkeypatch.setattr(pq, "read_metadata", counted_metadata)
    monkeypatch.setattr(pq, "ParquetFile", counted_file)
    return seen


def _config(*inputs: str):
    return load_config(None, {"input": list(inputs), "output": "/unused/out"})


def _check_plan(pattern: str, sizes: list[int], opened: dict) -> None:
    plan = plan_job(_config(pattern))
    paths = list(plan.paths)
    assert len(paths) == FILES
    assert list(plan.work) == [
        WorkItem(p, None, 0, None, size, paths[0]) for p, size in zip(paths, sizes, strict=True)
    ]
    assert plan.schema == _table(0, 1).schema
    # the first file's footer, then the first file again for the sample batch; no other file
    assert set(opened["paths"]) == {paths[0]}
    assert opened["footers"] == ["read_metadata", "ParquetFile"]
    tasks = [w for t in plan.shards.tasks for w in t.items]
    assert tasks == list(plan.work)
    assert plan.shards.bytes_per_input_byte > 0


def _convert(source: str, output, *extra: str):
    args = ["convert", "--input", source, "--output", str(output), "--max-bad-rows", "10"]
    return run_cli_captured([*args, *extra])


def _records(output) -> collections.Counter:
    with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    shards = [os.path.join(output, f) for s in manifest["splits"].values() for f in s["files"]]
    return collections.Counter(r for f in shards for r in read_records(f, sys.maxsize))


def _bad_rows(output, root: str) -> list[tuple[str, int, str]]:
    errors = os.path.join(output, "_errors")
    rows = [
        json.loads(line)
        for name in sorted(os.listdir(errors))
        for line in open(os.path.join(errors, name), encoding="utf-8").read().splitlines()
    ]
    return sorted((r["source"].removeprefix(root), r["row"], r["column"]) for r in rows)


EXPECTED_BAD = sorted(
    (f"/part-{i:05d}.parquet", row, "n") for i, rows in BAD.items() for row in rows
)


@pytest.fixture(scope="module")
def footer_run(files, tmp_path_factory):
    """The job with the plan that reads every footer (thresholds as shipped)."""
    out = tmp_path_factory.mktemp("footers") / "out"
    result = _convert(str(files / "good" / "*.parquet"), out)
    assert result.code == 0, result.err
    return out


def test_plan_reads_the_first_footer_only(files, lazy, opened):
    names = sorted((files / "good").iterdir())
    _check_plan(str(files / "good" / "*.parquet"), [os.path.getsize(p) for p in names], opened)


def test_lazy_run_equals_the_footer_run(files, footer_run, lazy, tmp_path):
    out = tmp_path / "out"
    result = _convert(str(files / "good" / "*.parquet"), out)
    assert result.code == 0, result.err
    assert _records(out) == _records(footer_run)
    assert sum(_records(out).values()) == sum(
        (12 if i in BAD else 3 + i % 10) - len(BAD.get(i, [])) for i in range(FILES)
    )
    root = str(files / "good")
    assert _bad_rows(out, root) == _bad_rows(footer_run, root) == EXPECTED_BAD


def test_an_odd_file_fails_the_run(files, lazy, tmp_path):
    first = files / "good" / "part-00000.parquet"
    odd = files / "odd" / "odd.parquet"
    result = _convert(str(files / "*" / "*.parquet"), tmp_path / "out")
    assert result.code != 0
    assert f"{first} and {odd} {ODD_MESSAGE}" in result.err


@pytest.fixture(scope="module")
def gcs_files(files):
    """The files in the storage emulator (gs://lazy/good/..., gs://lazy/odd/odd.parquet)."""
    from gcs_emulator import GcsEmulator

    with GcsEmulator(("lazy",)) as emulator, emulator.environ():
        for folder in ("good", "odd"):
            for path in sorted((files / folder).iterdir()):
                with FileSystems.create(f"gs://lazy/{folder}/{path.name}") as f:
                    f.write(path.read_bytes())
        yield "gs://lazy"


def test_plan_reads_the_first_footer_only_on_an_object_store(files, gcs_files, lazy, opened):
    names = sorted((files / "good").iterdir())
    _check_plan(f"{gcs_files}/good/*.parquet", [os.path.getsize(p) for p in names], opened)


def test_lazy_run_on_an_object_store(files, gcs_files, footer_run, lazy, tmp_path):
    out = tmp_path / "out"
    result = _convert(f"{gcs_files}/good/*.parquet", out)
    assert result.code == 0, result.err
    assert _records(out) == _records(footer_run)
    assert _bad_rows(out, f"{gcs_files}/good") == EXPECTED_BAD
    first, odd = f"{gcs_files}/good/part-00000.parquet", f"{gcs_files}/odd/odd.parquet"
    result = _convert(f"{gcs_files}/*/*.parquet", tmp_path / "odd")
    assert result.code != 0
    assert f"{first} and {odd} {ODD_MESSAGE}" in result.err
