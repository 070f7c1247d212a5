"""The TensorFlow-free reader (pipeline/reader/arrays.py): `iter_batches` gives, batch for batch,
the values `load_dataset` gives, on every supported type, both compressions and the layouts,
with splits and SequenceExamples; its partitions read every record once; it never imports
TensorFlow; a corrupt shard is named."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import REPO, SAMPLE_PARQUET, run_cli_captured
from test_reader import CONFIG, make_table

from pipeline.reader import load_dataset
from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.records import CorruptShardError

BATCH = 64


def convert(out: Path, source, *flags, config=None) -> Path:
    args = ["convert", "--input", source, "--output", out, *flags]
    if config is not None:
        path = Path(str(out) + ".yaml")
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", path]
    result = run_cli_captured(args)
    assert result.code == 0, result.err
    return out


def assert_same(ours, theirs, name: str) -> None:
    """One value of iter_batches against load_dataset's tensor of the same key."""
    if isinstance(theirs, tf.RaggedTensor):
        assert isinstance(ours, Ragged), name
        np.testing.assert_array_equal(ours.row_lengths, theirs.row_lengths().numpy(), name)
        if isinstance(theirs.values, tf.RaggedTensor):
            assert_same(ours.values, theirs.values, name)
        else:
            expected = theirs.values.numpy()
            assert ours.values.dtype == expected.dtype, name
            np.testing.assert_array_equal(ours.values, expected, name)
        return
    expected = theirs.numpy()
    assert ours.dtype == expected.dtype, (name, ours.dtype, expected.dtype)
    assert ours.shape == expected.shape, (name, ours.shape, expected.shape)
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected), name)
        np.testing.assert_array_equal(np.nan_to_num(ours), np.nan_to_num(expected), name)
    else:
        np.testing.assert_array_equal(ours, expected, name)


def assert_readers_agree(out: Path, split: str = "train", **kwargs) -> int:
    ours = list(iter_batches(str(out), split=split, batch_size=BATCH, **kwargs))
    theirs = list(load_dataset(str(out), split=split, batch_size=BATCH, **kwargs))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert sorted(a) == sorted(b)
        for key in a:
            assert_same(a[key], b[key], key)
    firsts = [next(iter(b.values())) for b in theirs]
    return sum(int(f.nrows()) if isinstance(f, tf.RaggedTensor) else len(f) for f in firsts)


@pytest.fixture(scope="module")
def all_types(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("arrays")
    table, _ = make_table()
    path = directory / "all_types.parquet"
    pq.write_table(table, path, row_group_size=250)
    return path


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
def test_every_type_equals_load_dataset(all_types, tmp_path, compression):
    out = convert(
        tmp_path / "out", all_types, "--num-shards", "3", "--batch-rows", "100",
        "--compression", compression, config=CONFIG,
    )  # fmt: skip
    assert assert_readers_agree(out) == 700
    assert_readers_agree(out, null_masks=False)


@pytest.mark.parametrize("layout", ["tfds", "tfx"])
def test_layouts(tmp_path, layout):
    flags = ["--layout", layout, "--compression", "none" if layout == "tfds" else "gzip"]
    out = convert(tmp_path / "out", SAMPLE_PARQUET, *flags)
    assert assert_readers_agree(out) == 2000


def test_splits_and_columns(all_types, tmp_path):
    config = {**CONFIG, "splits": {"train": 3, "eval": 1}}
    out = convert(tmp_path / "out", all_types, "--shard-mb", "0.01", config=config)
    rows = {split: assert_readers_agree(out, split=split) for split in ("train", "eval")}
    assert sum(rows.values()) == 700 and min(rows.values()) > 0
    (batch,) = list(iter_batches(str(out), split="eval", batch_size=1000, columns=["id"]))
    assert sorted(batch) == ["id"]
    with pytest.raises(ValueError, match="not features of the output"):
        next(iter_batches(str(out), columns=["nope"]))
    with pytest.raises(ValueError, match="split 'test' is not in the manifest"):
        next(iter_batches(str(out), split="test"))


def _events(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    n = 3_000
    table = pa.table(
        {
            "user": [f"u{i % 97}" for i in range(n)],
            "ts": rng.integers(0, 10**6, n),
            "price": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.2),
            "items": [[int(j) for j in range(i % 3)] for i in range(n)],
            "country": [f"c{(i % 97) % 5}" for i in range(n)],
        }
    )
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=700)
    return path


def test_sequences_equal_load_dataset(tmp_path):
    source = _events(tmp_path)
    config = {
        "splits": {"train": 4, "eval": 1},
        "sequence": {"group_by": "user", "order_by": "ts", "context": ["country"]},
    }
    out = convert(tmp_path / "out", source, config=config)
    assert assert_readers_agree(out) + assert_readers_agree(out, split="eval") == 97


def test_partitions_read_every_record_once(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--shard-mb", "0.03")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert len(manifest["splits"]["train"]["files"]) > 2
    ids = []
    for i in range(3):
        got = [b["trip_id"] for b in iter_batches(str(out), batch_size=100, shard_index=i,
                                                  num_shards=3)]  # fmt: skip
        part = np.concatenate(got)
        assert abs(len(part) - 2000 / 3) <= 1
        ids.append(part)
    everything = np.concatenate(ids)
    assert len(everything) == 2000 and len(np.unique(everything)) == 2000


def test_shuffle_and_repeat(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--shard-mb", "0.03")

    def ids(**kwargs):
        return np.concatenate([b["trip_id"] for b in iter_batches(str(out), **kwargs)])

    plain = ids(batch_size=128)
    shuffled = ids(batch_size=128, shuffle_buffer=500, seed=3)
    assert sorted(shuffled.tolist()) == sorted(plain.tolist())
    assert shuffled.tolist() != plain.tolist()
    assert ids(batch_size=128, shuffle_buffer=500, seed=3).tolist() == shuffled.tolist()
    twice = ids(batch_size=128, repeat=2, shuffle_buffer=500, seed=3)
    assert len(twice) == 4000 and twice[:2000].tolist() != twice[2000:].tolist()
    assert sorted(twice[2000:].tolist()) == sorted(plain.tolist())  # passes do not mix
    batches = list(iter_batches(str(out), batch_size=300, drop_remainder=True))
    assert len(batches) == 6 and all(len(b["trip_id"]) == 300 for b in batches)


def test_a_corrupt_shard_is_named(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET, "--compression", "none")
    shard = next(out.glob("train-*.tfrecord"))
    data = bytearray(shard.read_bytes())
    data[5000] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=r"train-00000-of-00001\.tfrecord: record \d+"):
        list(iter_batches(str(out)))


def test_a_truncated_gzip_shard_is_named(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET)
    shard = next(out.glob("train-*.tfrecord.gz"))
    shard.write_bytes(gzip.compress(gzip.decompress(shard.read_bytes())[:-10]))
    with pytest.raises(CorruptShardError, match="truncated"):
        list(iter_batches(str(out)))


def test_no_tensorflow_is_imported(tmp_path):
    out = convert(tmp_path / "out", SAMPLE_PARQUET)
    code = (
        "import sys\n"
        "from pipeline.reader.arrays import iter_batches\n"
        f"rows = sum(len(b['trip_id']) for b in iter_batches({str(out)!r}, batch_size=500))\n"
        "print(rows, 'tensorflow' in sys.modules, 'apache_beam' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.split() == ["2000", "False", "False"]
