"""Splits: a stable hash of the key column (or of the source row) with a salt picks each row's
split; files `<split>-SSSSS-of-NNNNN...`; rows per split in the manifest."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import example_to_dict, read_manifest, run_cli

from pipeline.job.config import ConfigError, load_config
from transforms.hashing import hash_bytes
from transforms.split.assign import assign_splits, partition_records

EXIT_OK, EXIT_USAGE = 0, 2
SAMPLE = Path(__file__).resolve().parents[1] / "sample" / "trips.parquet"
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


def _train_rows_by_key(table: pa.Table, key: str, salt: str) -> pa.Table:
    keep = [expected_split(str(v).encode(), salt) == "train" for v in table.column(key).to_pylist()]
    return table.filter(pa.array(keep))


def test_analyzers_are_fitted_on_the_train_split_only(tmp_path):
    """zscore's mean/std come from the train rows alone: no statistic leaks from eval/test."""
    config = write_config(
        tmp_path,
        "split_key: trip_id\nsplit_salt: s2\ntransforms:\n"
        "  - zscore: {column: fare, output: fare_z}\n"
        "  - vocabulary: {column: company, output: company_id}\n",
    )
    out = tmp_path / "out"
    args = ["convert", "--input", SAMPLE, "--output", out, "--config", config]
    assert run_cli(args) == EXIT_OK
    source = pq.read_table(SAMPLE)
    train = _train_rows_by_key(source, "trip_id", "s2")
    stats = json.loads((out / "transform" / "statistics.json").read_text())
    zscore = next(e for e in stats["analyzers"] if e["kind"] == "zscore")
    fares = np.array([v for v in train.column("fare").to_pylist() if v is not None])
    assert zscore["count"] == len(fares) < source.num_rows
    assert zscore["mean"] == pytest.approx(fares.mean(), rel=1e-12)
    assert zscore["std"] == pytest.approx(fares.std(), rel=1e-9)
    everyone = np.array([v for v in source.column("fare").to_pylist() if v is not None])
    assert abs(zscore["mean"] - everyone.mean()) > 1e-9  # the eval/test rows would move it
    manifest = read_manifest(out)
    assert manifest["transform"]["fitted_on_split"] == "train"
    # Each record's split is the one its source key picks, whatever the transforms did.
    got = split_records(out)
    for name, records in got.items():
        assert all(expected_split(str(r["trip_id"][0]).encode(), "s2") == name for r in records)
    assert sum(len(r) for r in got.values()) == source.num_rows


def test_whole_row_split_does_not_depend_on_the_transforms(tmp_path):
    """Without a key, a row's split is the hash of its source row: the same with and without
    transforms (and with fit_split choosing another split to fit on)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(600), "x": np.arange(600) * 0.25}), path)
    results = []
    for i, extra in enumerate(
        [
            "",
            "transforms:\n  - zscore: {column: x}\nfit_split: eval\n",
            "columns: {x: {keep_float64: true}}\n",
        ]
    ):
        out = tmp_path / f"out{i}"
        config = write_config(tmp_path, extra)
        assert run_cli(["convert", "--input", path, "--output", out, "--config", config]) == 0
        got = split_records(out)
        results.append({name: sorted(r["id"][0] for r in rs) for name, rs in got.items()})
    assert results[0] == results[1] == results[2]
    assert sorted(i for ids in results[0].values() for i in ids) == list(range(600))
    fitted = json.loads((tmp_path / "out1" / "transform" / "statistics.json").read_text())
    assert fitted["analyzers"][0]["count"] == len(results[0]["eval"])
    assert read_manifest(tmp_path / "out1")["transform"]["fitted_on_split"] == "eval"


def test_fit_split_must_be_a_split(tmp_path):
    config = write_config(tmp_path, "fit_split: validation\n")
    with pytest.raises(ConfigError, match="fit_split"):
        load_config(str(config), {"input": ["x"], "output": "o"})
