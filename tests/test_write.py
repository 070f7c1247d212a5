"""The sinks: the block sink writes the same record stream as Beam's WriteToTFRecord, and every
TFRecord reader (TensorFlow, Beam, Python's gzip + manual framing) reads its files."""

from __future__ import annotations

import glob
import gzip
import os
import struct
import zlib

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.encode.kernel.example import masked_crc32c
from transforms.encode.records import encode_table
from transforms.encode.schema import plan_features
from transforms.write.beam import WriteShards
from transforms.write.compression import check_level, gzip_compressor

OPTIONS = PipelineOptions(["--runner=FnApiRunner"])


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "x": pa.array(rng.random(n).astype(np.float32)),
            "s": pa.array([f"row-{i}" * (i % 4) for i in range(n)]),
            "v": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int64())),
        }
    )


def _batches(table: pa.Table, rows: int, framed: bool) -> list:
    specs = plan_features(table.schema)
    return [
        encode_table(table.slice(s, rows), specs, "t", s, framed)[0]
        for s in range(0, table.num_rows, rows)
    ]


def _write(batches: list, prefix: str, shards: int | None = None, **kwargs) -> list[str]:
    with beam.Pipeline(options=OPTIONS) as p:
        files = p | beam.Create(batches) | WriteShards(prefix, **kwargs)
        want = kwargs.get("num_shards") if shards is None else shards
        assert_that(files | beam.combiners.Count.Globally(), equal_to([want]))
    return sorted(glob.glob(prefix + "-*"))


def _read_frames(data: bytes) -> list[bytes]:
    """Parse TFRecord framing by hand, checking both CRCs."""
    out, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        assert length_crc == masked_crc32c(data[pos : pos + 8])
        record = data[pos + 12 : pos + 12 + length]
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        assert data_crc == masked_crc32c(record)
        out.append(record)
        pos += 16 + length
    return out


def test_block_sink_file_is_byte_identical_to_write_to_tfrecord(tmp_path):
    table = _table(700)
    blocks = _write(
        _batches(table, 700, True), str(tmp_path / "a"), compression="none", num_shards=1
    )
    beams = _write(
        _batches(table, 700, False),
        str(tmp_path / "b"),
        compression="none",
        num_shards=1,
        sink="tfrecordio",
    )
    assert len(blocks) == len(beams) == 1
    assert blocks[0].endswith("a-00000-of-00001.tfrecord")
    a, b = open(blocks[0], "rb").read(), open(beams[0], "rb").read()
    assert len(_read_frames(a)) == 700
    assert a == b


@pytest.mark.parametrize("backend", ["isal", "zlib"])
def test_gzip_blocks_decompress_to_the_write_to_tfrecord_stream(tmp_path, backend):
    table = _table(1000, seed=1)
    blocks = _write(
        _batches(table, 128, True), str(tmp_path / "a"), 1, compression="gzip", backend=backend
    )  # the rolling write (no num_shards): one gzip member per batch
    beams = _write(
        _batches(table, 128, False),
        str(tmp_path / "b"),
        compression="gzip",
        num_shards=1,
        sink="tfrecordio",
    )
    got = _read_frames(gzip.open(blocks[0]).read())
    want = _read_frames(gzip.open(beams[0]).read())
    # The order of batches inside one shard is the runner's; the records are the same.
    assert sorted(got) == sorted(want)
    assert len(got) == 1000
    # Several gzip members, one per block: the file is still one gzip stream to readers.
    raw = open(blocks[0], "rb").read()
    assert raw.count(b"\x1f\x8b\x08") >= 8


def test_tensorflow_and_beam_read_block_sink_gzip(tmp_path):
    tf = pytest.importorskip("tensorflow")
    table = _table(500, seed=2)
    files = _write(_batches(table, 64, True), str(tmp_path / "a"), compression="gzip", num_shards=2)
    assert [os.path.basename(f) for f in files] == [
        "a-00000-of-00002.tfrecord.gz",
        "a-00001-of-00002.tfrecord.gz",
    ]
    tf_records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    ids = sorted(tf.train.Example.FromString(r).features.feature["id"].int64_list.value[0]
                 for r in tf_records)  # fmt: skip
    assert ids == list(range(500))
    with beam.Pipeline(options=OPTIONS) as p:
        records = p | beam.io.ReadFromTFRecord(str(tmp_path / "a-*"))
        assert_that(records, equal_to(tf_records))


def test_zlib_output_reads_with_tensorflow_zlib(tmp_path):
    tf = pytest.importorskip("tensorflow")
    table = _table(300, seed=3)
    files = _write(
        _batches(table, 100, True), str(tmp_path / "z"), compression="zlib", num_shards=1
    )
    assert files[0].endswith(".tfrecord.deflate")
    assert len(_read_frames(zlib.decompress(open(files[0], "rb").read()))) == 300
    assert sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="ZLIB")) == 300


def test_levels_are_checked_per_backend():
    assert check_level("isal", None) == 2
    assert check_level("zlib", None) == 6
    with pytest.raises(ValueError, match="isal has compression levels 0-3, not 6"):
        check_level("isal", 6)
    with pytest.raises(ValueError, match="not one of"):
        gzip_compressor(1, "brotli")
    member = gzip_compressor(1, "isal")(memoryview(b"abc" * 100))
    assert gzip.decompress(member) == b"abc" * 100
