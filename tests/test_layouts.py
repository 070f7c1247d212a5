"""The tfds and tfx layouts (docs/downstream.md).

- tfds: `tfds.builder_from_directory(output)` opens the output, its shard lengths are the
  records of each file, `as_dataset(split=...)` gives, row by row, the values `load_dataset`
  gives (dtypes and shapes; a nullable feature as a leading dimension of 0 or 1), and split
  slices land on the same records.
- tfx: `Split-<split>/data_tfrecord-SSSSS-of-NNNNN.gz`, examples_artifact.json, and the reader,
  verify and inspect on it; what `--overwrite` and a new run clear of each layout.
- the checks of options a layout cannot take.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from conftest import run_cli_captured
from test_reader import make_table

from pipeline.job.config import ConfigError, config_to_json, load_config
from pipeline.output.directory import clear_leftovers, clear_previous_output
from pipeline.output.layouts import check_layout_features
from pipeline.reader import PRESENT_SUFFIX, load_dataset
from pipeline.verify.inspect import inspect_path
from transforms.encode.schema import FeatureSpec, SchemaError

ROWS = 600
SPLITS = {"train": 3, "eval": 1}


def _table() -> pa.Table:
    """Nulls, zeros, empty strings and lists, every kind of shape; row `i` has id `i`."""
    rng = np.random.default_rng(14)
    n = ROWS

    def nulls(values: list, every: int) -> list:
        return [None if i % every == 3 else v for i, v in enumerate(values)]

    ints = [int(v) for v in rng.integers(-3, 4, n)]  # zeros among them
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "count": pa.array(nulls(ints, 5), pa.int32()),
            "fare": pa.array(nulls([float(v) if v else 0.0 for v in ints], 7), pa.float64()),
            "flag": pa.array(nulls([v > 0 for v in ints], 4), pa.bool_()),
            "big": pa.array([2**63 - 1 - i for i in range(n)], pa.uint64()),
            "name": pa.array(nulls(["" if v == 0 else f"n{v}" for v in ints], 6), pa.string()),
            "grid": pa.array(
                nulls([[[i, 0], [-i, 1]] for i in range(n)], 9),
                pa.list_(pa.list_(pa.int32())),
            ),
            "scores": pa.array([[float(i)] * (i % 4) for i in range(n)], pa.list_(pa.float32())),
            "tags": pa.array(
                nulls([[f"t{j}" for j in range(i % 3)] for i in range(n)], 8),
                pa.list_(pa.string()),
            ),
            "exact": pa.array([i / 3 for i in range(n)], pa.float64()),
            "place": pa.array(
                [{"x": i % 5, "y": None if i % 11 == 0 else f"p{i}"} for i in range(n)],
                pa.struct([("x", pa.int16()), ("y", pa.string())]),
            ),
        }
    )


CONFIG = {
    "splits": SPLITS,
    "batch_rows": 50,
    "columns": {
        "exact": {"keep_float64": True, "null_policy": "fail"},
        "grid": {"shape": [2, 2]},
    },
}


def _convert(tmp: Path, source: Path, name: str, *flags: str, config: dict | None = None) -> Path:
    out = tmp / name
    args = ["convert", "--input", str(source), "--output", str(out), *flags]
    if config is not None:
        path = tmp / f"{name}.yaml"
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", str(path)]
    result = run_cli_captured(args)
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layouts") / "table.parquet"
    pq.write_table(_table(), path, row_group_size=150)
    return path


@pytest.fixture(scope="module")
def tfds_output(source: Path) -> Path:
    # Small shards: several per split, so slices cross shard boundaries.
    return _convert(source.parent, source, "tfds_out", "--layout", "tfds", "--shard-mb",
                    "0.01", config=CONFIG)  # fmt: skip


def _rows(output: Path, split: str) -> list[dict]:
    """load_dataset's values, one dict of numpy values per row, in shard order."""
    (batch,) = load_dataset(str(output), split, batch_size=10_000, num_parallel_reads=None)
    rows = [{} for _ in range(int(batch["id"].shape[0]))]
    for name, value in batch.items():
        values = value.to_list() if isinstance(value, tf.RaggedTensor) else value.numpy()
        for row, v in zip(rows, values, strict=True):
            row[name] = v
    return rows


def _tfds_rows(builder, split: str) -> list[dict]:
    read = tfds.ReadConfig(interleave_cycle_length=1)
    ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read)
    return list(tfds.as_numpy(ds))


def _equal(a: np.ndarray, b: object) -> bool:
    """Equal values (NaN equal to NaN)."""
    b = np.asarray(b)
    nan = a.dtype.kind == "f" and b.dtype.kind == "f"
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=nan))


def _assert_same_row(got: dict, want: dict, manifest: dict) -> None:
    for feature in manifest["features"]:
        name, shape = feature["name"], feature["shape"]
        value = np.asarray(got[name])
        ragged = shape is None or (shape and shape[0] < 0)
        if ragged:  # a variable length: the row's values, a null list as an empty one
            expected = np.array(want[name], dtype=value.dtype).reshape(value.shape)
            assert value.shape[0] == len(want[name]), name
            assert _equal(value, expected), (name, value, expected)
            continue
        if feature["null_count"] > 0:  # a leading dimension: 0 where null, 1 where present
            present = bool(want[name + PRESENT_SUFFIX])
            assert value.shape == (int(present), *shape), name
            if not present:
                continue
            value = np.asarray(value[0])
        assert value.shape == tuple(shape), name
        assert _equal(value, want[name]), (name, value, want[name])
        if value.dtype != object:
            assert value.dtype == np.asarray(want[name]).dtype, name


@pytest.fixture(scope="module")
def both_rows(tfds_output: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """Per split: (TFDS's rows, load_dataset's rows), each in shard order."""
    builder = tfds.builder_from_directory(str(tfds_output))
    return {split: (_tfds_rows(builder, split), _rows(tfds_output, split)) for split in SPLITS}


def test_tfds_reads_what_load_dataset_reads(tfds_output: Path, both_rows: dict) -> None:
    manifest = json.loads((tfds_output / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["compression"] == "none"
    assert manifest["layout"] == {"name": "tfds", "files": ["dataset_info.json", "features.json"]}
    builder = tfds.builder_from_directory(str(tfds_output))
    assert set(builder.info.splits) == set(SPLITS)
    for split in SPLITS:
        entry = manifest["splits"][split]
        counts = [
            sum(1 for _ in tf.data.TFRecordDataset(str(tfds_output / f))) for f in entry["files"]
        ]
        assert len(counts) > 2
        assert builder.info.splits[split].shard_lengths == counts
        assert builder.info.splits[split].num_examples == entry["rows"]
        got, want = both_rows[split]
        assert [int(r["id"]) for r in got] == [int(r["id"]) for r in want]
        for g, w in zip(got, want, strict=True):
            _assert_same_row(g, w, manifest)


def test_tfds_nulls_are_a_leading_dimension(tfds_output: Path, both_rows: dict) -> None:
    features = tfds.builder_from_directory(str(tfds_output)).info.features
    assert features["count"].shape == (None,) and features["count"].np_dtype == np.int32
    assert features["id"].shape == () and features["big"].np_dtype == np.uint64
    assert features["grid"].shape == (None, 2, 2)
    assert features["scores"].shape == (None,)
    by_id = {int(r["id"]): r for got, _ in both_rows.values() for r in got}
    assert sorted(by_id) == list(range(ROWS))
    table = _table().to_pydict()
    for i in range(ROWS):
        count, row = table["count"][i], by_id[i]
        assert row["count"].tolist() == ([] if count is None else [count])  # 0 stays [0]
        name = table["name"][i]
        assert row["name"].tolist() == ([] if name is None else [name.encode()])
        assert row["big"] == np.uint64(2**63 - 1 - i)
        assert row["exact"] == i / 3  # keep_float64: exact
        assert row["place.y"].tolist() == ([] if i % 11 == 0 else [f"p{i}".encode()])
    assert any(r["count"].tolist() == [0] for r in by_id.values())
    assert any(r["name"].tolist() == [b""] for r in by_id.values())


def test_tfds_slices_land_on_the_same_records(tfds_output: Path, both_rows: dict) -> None:
    builder = tfds.builder_from_directory(str(tfds_output))
    ids = [int(r["id"]) for r in both_rows["train"][1]]
    first = [int(r["id"]) for r in _tfds_rows(builder, "train[:10%]")]
    assert 0 < len(first) < len(ids) and first == ids[: len(first)]
    middle = [int(r["id"]) for r in _tfds_rows(builder, "train[10:250]")]
    assert middle == ids[10:250]


def test_tfds_reads_every_type_as_load_dataset(tmp_path: Path) -> None:
    """The reader tests' table of every supported type (dates, timestamps, decimals, binary,
    float16, unsigned, fixed and variable arrays, a variable outer dimension, struct leaves)."""
    table, _ = make_table()
    pq.write_table(table, tmp_path / "all.parquet", row_group_size=250)
    keep = {"keep_float64": True, "null_policy": "fail"}
    columns = {"pairs": {"shape": [-1, 2]}, "f64_keep_fixed": keep}
    out = _convert(tmp_path, tmp_path / "all.parquet", "out", "--layout", "tfds", "--num-shards",
                   "2", config={"columns": columns})  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["pairs"].shape == (None, 2)
    got, want = _tfds_rows(builder, "train"), _rows(out, "train")
    assert len(got) == len(want) == table.num_rows
    for g, w in zip(got, want, strict=True):
        _assert_same_row(g, w, manifest)


@pytest.fixture(scope="module")
def tfx_output(source: Path) -> Path:
    return _convert(source.parent, source, "tfx_out", "--layout", "tfx", "--num-shards", "2",
                    config=CONFIG)  # fmt: skip


def test_tfx_layout_names_and_artifact(tfx_output: Path) -> None:
    manifest = json.loads((tfx_output / "manifest.json").read_text(encoding="utf-8"))
    for split in SPLITS:
        names = sorted(p.name for p in (tfx_output / f"Split-{split}").iterdir())
        assert names == [f"data_tfrecord-0000{i}-of-00002.gz" for i in range(2)]
        assert manifest["splits"][split]["files"] == [f"Split-{split}/{n}" for n in names]
    assert not list(tfx_output.glob("*-of-*"))  # nothing at the top
    artifact = json.loads((tfx_output / "examples_artifact.json").read_text(encoding="utf-8"))
    assert artifact["type_name"] == "Examples"
    assert json.loads(artifact["properties"]["split_names"]) == list(SPLITS)
    assert artifact["custom_properties"] == {
        "file_format": "tfrecords_gzip",
        "payload_format": "FORMAT_TF_EXAMPLE",
    }
    assert {s: e["rows"] for s, e in artifact["splits"].items()} == {
        s: manifest["splits"][s]["rows"] for s in SPLITS
    }
    assert manifest["layout"] == {"name": "tfx", "files": ["examples_artifact.json"]}
    # TFX reads every file of Split-<split>/ as gzip TFRecords
    records = tf.data.TFRecordDataset(
        [str(p) for p in sorted((tfx_output / "Split-train").iterdir())], "GZIP"
    )
    assert sum(1 for _ in records) == manifest["splits"]["train"]["rows"]


def test_tfx_layout_reads_verifies_and_overwrites(tfx_output: Path, both_rows: dict) -> None:
    for split in SPLITS:  # the same rows as the tfds layout's (another compression and names)
        got = sorted(_rows(tfx_output, split), key=lambda r: int(r["id"]))
        want = sorted(both_rows[split][1], key=lambda r: int(r["id"]))
        assert len(got) == len(want) > 0
        for g, w in zip(got, want, strict=True):
            assert g.keys() == w.keys()
            for name in g:
                np.testing.assert_array_equal(np.asarray(g[name]), np.asarray(w[name]), name)
    result = run_cli_captured(["verify", str(tfx_output), "--source"])
    assert result.code == 0, result.out
    report = inspect_path(str(tfx_output), 2)
    assert report["manifest"]["splits"]["train"]["files"][0].startswith("Split-train/")
    assert len(report["records"]) == 2
    stale = tfx_output / "Split-eval" / "data_tfrecord-00005-of-00009.gz"
    stale.write_bytes(b"")
    result = run_cli_captured(["verify", str(tfx_output)])
    stale.unlink()
    assert result.code == 1 and "data_tfrecord-00005-of-00009.gz" in result.out
    # what --overwrite clears: the manifest, the shards, the artifact file, the split directories
    clear_previous_output(str(tfx_output), overwrite=True)
    assert [p.name for p in tfx_output.iterdir()] == []


def test_leftovers_of_every_layout_are_cleared(tmp_path: Path) -> None:
    """A run that did not finish may leave shards of any layout and metadata files."""
    left = ["train-00001-of-00003.tfrecord", "dataset_info.json", "features.json",
            "examples_artifact.json", "Split-train/data_tfrecord-00000-of-00002.gz",
            "Split-eval/data_tfrecord-00001-of-00002.gz", "keep.txt"]  # fmt: skip
    for name in left:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    clear_leftovers(str(tmp_path), tuple(SPLITS.items()))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "keep.txt"
    ]


def _config(**flags: object) -> dict:
    return config_to_json(load_config(None, {"input": ["x.parquet"], "output": "o", **flags}))


def test_layout_options_checked() -> None:
    assert "layout" not in _config()  # the default layout leaves the manifest as it was
    assert _config(layout="tfds")["compression"] == "none"
    assert _config(layout="tfx")["layout"] == "tfx"
    for flags, words in [
        ({"layout": "tfds", "compression": "gzip"}, "TFDS reads shards uncompressed"),
        ({"layout": "tfx", "compression": "zlib"}, "use compression gzip"),
        ({"layout": "tfx", "sink": "tfrecordio"}, "use sink: blocks"),
    ]:
        with pytest.raises(ConfigError, match=words):
            _config(**flags)


def test_tfds_refuses_a_keep_float64_that_drops_nulls(source: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"columns": {"exact": {"keep_float64": True}}}))
    out = tmp_path / "out"
    result = run_cli_captured(["convert", "--input", source, "--output", out,
                               "--layout", "tfds", "--config", config])  # fmt: skip
    assert result.code == 2
    assert "column 'exact': layout tfds: a keep_float64 column needs null_policy" in result.err
    assert not out.exists() or not list(out.iterdir())


def test_tfds_refuses_a_slash_in_a_feature_name() -> None:
    spec = FeatureSpec("a/b", ("a/b",), "int64", "int64", (), "values", "int64")
    check_layout_features("tfx", [spec])  # only TFDS reads "/" as nesting
    with pytest.raises(SchemaError, match="column 'a/b': layout tfds: TFDS reads '/'"):
        check_layout_features("tfds", [spec])
