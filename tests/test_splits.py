"""Splits: a stable hash of the key column (or of the record) with a salt picks each row's split;
files `<split>-SSSSS-of-NNNNN...`; rows per split in the manifest."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import example_to_dict, read_manifest, run_cli

from pipeline.config import ConfigError, load_config
from transforms.preprocess.hashing import hash_bytes
from transforms.split import assign_splits, partition_records

EXIT_OK, EXIT_USAGE = 0, 2
SPLITS = {"train": 80, "eval": 10, "test": 10}


def expected_split(key: bytes, salt: str) -> str:
    x = hash_bytes(salt.encode() + key) % 100
    return "train" if x < 80 else "eval" if x < 90 else "test"


def split_records(out: Path) -> dict[str, list[dict]]:
    manifest = read_manifest(out)
    got = {}
    for name, entry in manifest["splits"].items():
        files = [str(out / f) for f in entry["files"]]
        ds = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
        got[name] = [example_to_dict(tf.train.Example.FromString(r.numpy())) for r in ds]
    return got


def write_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text("splits: {train: 80, eval: 10, test: 10}\n" + extra, encoding="utf-8")
    return config


def test_key_column_split_matches_the_documented_hash(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(2000), "s": [f"v{i}" for i in range(2000)]}), path)
    config = write_config(tmp_path, "split_key: id\nsplit_salt: s1\n")
    out = tmp_path / "out"
    args = ["convert", "--input", path, "--output", out, "--config", config, "--batch-rows", "300"]
    assert run_cli(args) == EXIT_OK
    manifest = read_manifest(out)
    got = split_records(out)
    assert set(got) == set(SPLITS)
    for name, records in got.items():
        assert all(expected_split(str(r["id"][0]).encode(), "s1") == name for r in records)
        assert manifest["splits"][name]["rows"] == len(records)
        assert manifest["splits"][name]["files"] == [f"{name}-00000-of-00001.tfrecord.gz"]
    assert sorted(r["id"][0] for rs in got.values() for r in rs) == list(range(2000))
    assert 1400 < len(got["train"]) < 1800 and len(got["eval"]) > 100
    assert manifest["split"] == {"weights": SPLITS, "key": "id", "salt": "s1"}


def test_whole_row_split_is_the_same_across_batchings_and_sinks(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(500), "x": np.arange(500) * 0.5}), path)
    config = write_config(tmp_path)
    results = []
    for i, extra in enumerate(
        [["--batch-rows", "7"], ["--batch-rows", "1000", "--sink", "tfrecordio"]]
    ):
        out = tmp_path / f"out{i}"
        assert (
            run_cli(["convert", "--input", path, "--output", out, "--config", config, *extra]) == 0
        )
        got = split_records(out)
        results.append({name: sorted(r["id"][0] for r in rs) for name, rs in got.items()})
    assert results[0] == results[1]
    assert sum(len(v) for v in results[0].values()) == 500


def test_assign_splits_on_record_bytes_ignores_the_frame():
    data = np.frombuffer(b"aaaabbbbbbcc", np.uint8)
    offsets = np.array([0, 4, 10, 12])
    plain = assign_splits([1, 1, 1], "x", buffer=data, offsets=offsets)
    framed = np.frombuffer(
        b"".join(b"\0" * 12 + bytes(data[a:b]) + b"\0" * 4 for a, b in itertools.pairwise(offsets)),
        np.uint8,
    )
    framed_offsets = offsets + 16 * np.arange(4)
    assert list(
        assign_splits([1, 1, 1], "x", buffer=framed, offsets=framed_offsets, framed=True)
    ) == list(plain)
    for i, (a, b) in enumerate(itertools.pairwise(offsets)):
        assert plain[i] == min(2, hash_bytes(b"x" + bytes(data[a:b])) % 3)


def test_partition_keeps_order():
    data = np.frombuffer(b"abbcccdddd", np.uint8)
    offsets = np.array([0, 1, 3, 6, 10])
    parts = partition_records(data, offsets, np.array([1, 0, 1, 0]), 3)
    assert bytes(parts[0][0]) == b"bbdddd" and list(parts[0][1]) == [0, 2, 6]
    assert bytes(parts[1][0]) == b"accc" and list(parts[1][1]) == [0, 1, 4]
    assert parts[2] is None


@pytest.mark.parametrize(
    "text", ["splits: []\n", "splits: {train: 0}\n", "splits: {'a/b': 1}\n", "splits: {a: 1.5}\n"]
)
def test_bad_splits_config(tmp_path, text):
    config = tmp_path / "job.yaml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="splits"):
        load_config(str(config), {"input": ["x"], "output": "o"})


def test_split_key_must_be_a_key_column(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(5), "x": [0.5] * 5}), path)
    for key in ("nope", "x"):
        config = write_config(tmp_path, f"split_key: {key}\n")
        args = ["convert", "--input", path, "--output", tmp_path / "o", "--config", config]
        assert run_cli(args) == EXIT_USAGE
        assert "split_key" in capsys.readouterr().err


def test_analyzers_are_not_fitted_across_splits(tmp_path):
    """Fitting zscore over every row would leak eval statistics into train: refused up front."""
    config = tmp_path / "c.yaml"
    config.write_text("splits: {train: 80, eval: 20}\ntransforms:\n  - zscore: {column: fare}\n")
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    code = run_cli(
        ["convert", "--input", repo / "sample" / "trips.parquet", "--output", out,
         "--config", config]
    )  # fmt: skip
    assert code == 2
    assert not (out / "manifest.json").exists()
