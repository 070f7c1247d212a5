"""Planning many small Parquet files: each footer read once (schema and row groups from the same
read, in a thread pool), the work items and rows of every file, and the schema check still
naming the two files that disagree."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.job.config import load_config
from pipeline.job.plan import plan_job
from transforms.encode.schema import SchemaError
from transforms.read.files import InputError
from transforms.read.inputs import input_schema
from transforms.read.parquet_reader import parquet_footers
from transforms.read.work import plan_work

FILES = 2_000


def _table(start: int, rows: int, id_type: pa.DataType | None = None) -> pa.Table:
    ids = np.arange(start, start + rows)
    return pa.table(
        {
            "id": pa.array(ids, id_type or pa.int64()),
            "name": pa.array([f"n{i}" for i in ids]),
            "score": pa.array(ids / 7.0, pa.float32()),
        }
    )


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """FILES small files: file i holds 1 + i % 5 rows; every 100th file two row groups."""
    root = tmp_path_factory.mktemp("many")
    good = root / "good"
    good.mkdir()
    rows, groups = [], []
    for i in range(FILES):
        n = 1 + i % 5
        split = i % 100 == 0 and n > 1
        pq.write_table(
            _table(10 * i, n), good / f"part-{i:05d}.parquet", row_group_size=1 if split else None
        )
        rows.append(n)
        groups.append(n if split else 1)
    return root, rows, groups


def _config(*inputs: str):
    return load_config(None, {"input": list(inputs), "output": "/unused/out"})


def test_plan_of_many_small_files(many):
    root, rows, groups = many
    plan = plan_job(_config(str(root / "good" / "*.parquet")))
    names = [f"part-{i:05d}.parquet" for i in range(FILES)]
    assert [p.rsplit("/", 1)[1] for p in plan.paths] == names
    assert plan.schema == _table(0, 1).schema
    assert len(plan.work) == sum(groups)
    assert sum(w.num_rows for w in plan.work) == sum(rows)
    per_file: dict[str, list[tuple[int, int, int]]] = {}
    for w in plan.work:
        per_file.setdefault(w.path, []).append((w.row_group, w.first_row, w.num_rows))
    for i, path in enumerate(plan.paths):
        if groups[i] == 1:
            assert per_file[path] == [(0, 0, rows[i])]
        else:  # one row per row group
            assert per_file[path] == [(g, g, 1) for g in range(rows[i])]
    covered = [w for t in plan.shards.tasks for w in t.items]
    assert covered == list(plan.work)  # every work item in one task, in order


def test_one_odd_file_among_many_is_named(many, tmp_path):
    root, _, _ = many
    odd = tmp_path / "odd.parquet"
    pq.write_table(_table(0, 3, pa.int32()), odd)
    with pytest.raises(SchemaError) as err:
        plan_job(_config(str(root / "good" / "*.parquet"), str(odd)))
    first = str(root / "good" / "part-00000.parquet")
    assert str(err.value) == (
        f"{first} and {odd} do not have the same schema: column 'id': int64 vs int32"
        " (schema: unify reads files whose schemas differ as their union)"
    )


def test_footers_read_once_for_schema_and_work(many):
    root, rows, _ = many
    paths = sorted(str(p) for p in (root / "good").glob("*.parquet"))[:300]
    pooled = parquet_footers(paths)
    assert [m.num_rows for m in pooled] == [pq.read_metadata(p).num_rows for p in paths]
    assert [m.num_rows for m in pooled] == rows[:300]
    assert plan_work(paths, "parquet", pooled) == plan_work(paths, "parquet")
    schema = input_schema(paths, "parquet", None, pooled)  # the CSV options are not used
    assert schema == pq.read_schema(paths[0]).remove_metadata()


def test_an_unreadable_file_among_many_is_named(many, tmp_path):
    root, _, _ = many
    paths = sorted(str(p) for p in (root / "good").glob("*.parquet"))[:50]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match=f"^{broken}: cannot read as Parquet"):
        parquet_footers([*paths[:25], str(broken), *paths[25:]])


GCS_FILES = 150  # the emulator takes each object in a request of its own


@pytest.fixture(scope="module")
def gcs_many(many):
    """GCS_FILES of the small files and one odd file in the storage emulator."""
    from apache_beam.io.filesystems import FileSystems
    from gcs_emulator import GcsEmulator

    root, rows, groups = many
    with GcsEmulator(("many",)) as emulator, emulator.environ():
        for i in range(GCS_FILES):
            name = f"part-{i:05d}.parquet"
            with FileSystems.create(f"gs://many/good/{name}") as f:
                f.write((root / "good" / name).read_bytes())
        odd = pa.BufferOutputStream()
        pq.write_table(_table(0, 3, pa.int32()), odd)
        with FileSystems.create("gs://many/odd/odd.parquet") as f:
            f.write(odd.getvalue().to_pybytes())
        yield rows[:GCS_FILES], groups[:GCS_FILES]


def test_plan_of_many_files_on_an_object_store(gcs_many):
    rows, groups = gcs_many
    plan = plan_job(_config("gs://many/good/*.parquet"))
    assert list(plan.paths) == [f"gs://many/good/part-{i:05d}.parquet" for i in range(GCS_FILES)]
    assert plan.schema == _table(0, 1).schema
    assert len(plan.work) == sum(groups)
    assert [w.num_rows for w in plan.work if w.row_group == 0] == [
        1 if g > 1 else n for n, g in zip(rows, groups, strict=True)
    ]
    assert sum(w.num_rows for w in plan.work) == sum(rows)
    with pytest.raises(SchemaError) as err:
        plan_job(_config("gs://many/good/*.parquet", "gs://many/odd/*.parquet"))
    assert str(err.value) == (
        "gs://many/good/part-00000.parquet and gs://many/odd/odd.parquet do not have the same "
        "schema: column 'id': int64 vs int32 (schema: unify reads files whose schemas differ as "
        "their union)"
    )
