"""Index files (`--index`) and random access by record number (pipeline/reader/index.py), and
the PyTorch datasets (pipeline/reader/torch.py) and a grain data source over them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE_PARQUET, run_cli_captured
from test_reader import CONFIG, make_table

from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import RecordIndex, read_record
from pipeline.reader.records import CorruptShardError
from transforms.write.index import make_index


def convert(out: Path, source, *flags, config=None) -> Path:
    args = ["convert", "--input", source, "--output", out, *flags]
    if config is not None:
        path = Path(str(out) + ".yaml")
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", path]
    result = run_cli_captured(args)
    assert result.code == 0, result.err
    return out


def rows_in_order(out: Path, split: str = "train") -> list[dict]:
    """Every row of the split in the reader's order, as read_record gives a row."""
    rows = []
    for batch in iter_batches(str(out), split=split, batch_size=97):
        columns = {k: v.rows() if isinstance(v, Ragged) else v for k, v in batch.items()}
        n = len(next(iter(columns.values())))
        rows += [{k: v[j] for k, v in columns.items()} for j in range(n)]
    return rows


def same_row(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.dtype == y.dtype and x.shape == y.shape, key
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(np.nan_to_num(x), np.nan_to_num(y), key)
        else:
            np.testing.assert_array_equal(x, y, key)


@pytest.fixture(scope="module")
def all_types(tmp_path_factory) -> Path:
    table, _ = make_table()
    path = tmp_path_factory.mktemp("index") / "all_types.parquet"
    pq.write_table(table, path, row_group_size=250)
    return path


@pytest.mark.parametrize("compression", ["gzip", "none"])
@pytest.mark.parametrize("engine", ["in-process", "beam"])
def test_random_access_equals_the_sequential_read(all_types, tmp_path, compression, engine):
    config = {**CONFIG, "splits": {"train": 3, "eval": 1}}
    out = convert(
        tmp_path / "out", all_types, "--index", "--compression", compression, "--engine", engine,
        "--shard-mb", "0.01", config=config,
    )  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    for split, entry in manifest["splits"].items():
        assert len(entry["files"]) > 1
        for shard in entry["shards"]:
            assert shard["index"] == shard["file"] + ".idx" and (out / shard["index"]).is_file()
        expected = rows_in_order(out, split)
        with RecordIndex(str(out), split) as records:
            assert len(records) == len(expected) == entry["rows"]
            rng = np.random.default_rng(1)
            for i in [0, len(expected) - 1, -1, *rng.integers(0, len(expected), 60).tolist()]:
                same_row(records[i], expected[i])
            picks = rng.integers(0, len(expected), 40)
            batch = records.batch(picks)
            got = {k: v.rows() if isinstance(v, Ragged) else v for k, v in batch.items()}
            for j, i in enumerate(picks.tolist()):
                same_row({k: v[j] for k, v in got.items()}, expected[i])
    same_row(read_record(str(out), "eval", 3), rows_in_order(out, "eval")[3])
    assert run_cli_captured(["verify", out]).code == 0


def test_the_uncompressed_index_is_dalis_format(tmp_path):
    """`offset size` per record: the frame's offset and its whole size, as tfrecord2idx writes."""
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--index", "--compression", "none")
    shard = next(out.glob("train-*.tfrecord"))
    data = shard.read_bytes()
    lines = (out / (shard.name + ".idx")).read_text(encoding="ascii").splitlines()
    offsets = [tuple(map(int, line.split())) for line in lines]
    assert len(offsets) == 2000 and offsets[0][0] == 0
    for (a, size), (b, _) in itertools.pairwise(offsets):
        assert a + size == b
        assert int.from_bytes(data[a : a + 8], "little") + 16 == size
    assert offsets[-1][0] + offsets[-1][1] == len(data)


def test_gzip_members_stay_small(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--index")
    shard = next(out.glob("train-*.tfrecord.gz"))
    rows = make_index(str(shard), "gzip")
    members = np.unique(rows[:, 0])
    assert len(members) > 5
    inflated = rows[:, 2] + rows[:, 3]
    per_member = [inflated[rows[:, 0] == m].max() for m in members]
    assert max(per_member) < 40 << 10  # 32 KiB of records and the record that crosses it


def test_a_wrong_index_is_found(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--index", "--compression", "none")
    index = next(out.glob("*.idx"))
    lines = index.read_text(encoding="ascii").splitlines()
    original = list(lines)
    lines[10], lines[11] = lines[11], lines[10]
    index.write_text("\n".join(lines) + "\n", encoding="ascii")
    result = run_cli_captured(["verify", out, "--json"])
    assert result.code == 1
    report = json.loads(result.out.splitlines()[-1])
    assert report["finding_counts"] == {"index": 1}
    with pytest.raises(CorruptShardError, match="line 11: the record does not start where"):
        RecordIndex(str(out))[0]
    index.write_text("\n".join(original[:-5]) + "\n", encoding="ascii")
    with pytest.raises(CorruptShardError, match="entries, the manifest counts 2000"):
        RecordIndex(str(out))[0]


def test_index_refusals(tmp_path):
    result = run_cli_captured(
        ["convert", "--input", SAMPLE_PARQUET, "--output", tmp_path / "z", "--index",
         "--compression", "zlib"]
    )  # fmt: skip
    assert result.code == 2 and "a zlib shard is one deflate stream" in result.err
    out = convert(tmp_path / "plain", SAMPLE_PARQUET)
    with pytest.raises(ValueError, match="written without --index"):
        RecordIndex(str(out))


def test_an_index_is_cleared_with_its_output(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--index")
    assert list(out.glob("*.idx"))
    convert(out, SAMPLE_PARQUET, "--overwrite")
    assert not list(out.glob("*.idx"))


# ------------------------------------------------------------------ PyTorch and grain


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("torch") / "out"
    return convert(out, SAMPLE_PARQUET, "--index", "--shard-mb", "0.03")


def test_torch_loader_workers_and_ranks_read_every_row_once(indexed):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from pipeline.reader.torch import TorchBatches

    seen = []
    for rank in range(2):
        ds = TorchBatches(str(indexed), batch_size=64, rank=rank, world_size=2)
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        for batch in loader:
            assert isinstance(batch["trip_id"], torch.Tensor)
            assert batch["fare__present"].dtype == torch.bool
            seen.append(batch["trip_id"].numpy())
    ids = np.concatenate(seen)
    assert len(ids) == 2000 and len(np.unique(ids)) == 2000


def test_torch_map_dataset_over_the_index(indexed):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from pipeline.reader.torch import TorchRecords

    ds = TorchRecords(str(indexed), columns=["trip_id", "fare", "tags"])
    assert len(ds) == 2000
    expected = rows_in_order(indexed)
    row = ds[1234]
    assert int(row["trip_id"]) == int(expected[1234]["trip_id"])
    assert [bytes(t) for t in row["tags"]] == [bytes(t) for t in expected[1234]["tags"]]

    def collate(rows):
        return torch.stack([r["trip_id"] for r in rows])

    loader = DataLoader(ds, batch_size=50, shuffle=True, num_workers=2, collate_fn=collate)
    ids = torch.cat(list(loader)).numpy()
    assert sorted(ids.tolist()) == sorted(int(r["trip_id"]) for r in expected)


def test_grain_random_access_source(indexed):
    grain = pytest.importorskip("grain.python")
    from pipeline.reader.index import RecordIndex

    class Source(grain.RandomAccessDataSource):
        def __init__(self, output):
            self.records = RecordIndex(output, columns=["trip_id", "fare"])

        def __len__(self):
            return len(self.records)

        def __getitem__(self, i):
            return self.records[i]

    source = Source(str(indexed))
    sampler = grain.IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1,
                                 shard_options=grain.NoSharding())  # fmt: skip
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    ids = [int(row["trip_id"]) for row in loader]
    assert sorted(ids) == sorted(int(r["trip_id"]) for r in rows_in_order(indexed))
