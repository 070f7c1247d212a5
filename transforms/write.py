"""The sinks: encoded batches -> sharded TFRecord files, through Beam's file-sink machinery.

Two sinks, selected by `sink`:
- "blocks" (default): one element per batch; the batch arrives already framed (length,
  masked crc32c, data, masked crc32c per record) and is appended to the shard as one block.
  With gzip each block is compressed on its own into one gzip member: a file of concatenated
  members is a standard .gz file that TensorFlow, Beam and Python's gzip all read whole.
- "tfrecordio": Beam's WriteToTFRecord, one element per record (Beam frames each record).
Both use Beam's FileBasedSink: temp files, then finalize and rename into place.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.iobase import Write
from apache_beam.io.tfrecordio import WriteToTFRecord

from transforms.encode import EncodedBatch

__all__ = [
    "COMPRESSIONS",
    "GZIP_BACKENDS",
    "SINKS",
    "WriteShards",
    "check_level",
    "file_suffix",
    "gzip_compressor",
]

COMPRESSIONS = ("gzip", "zlib", "none")
SINKS = ("blocks", "tfrecordio")
GZIP_BACKENDS = ("isal", "zlib")
# Measured on the benchmark table (bench/): isal level 2 compresses ~13x faster than zlib level 6
# for a ~14% larger file; zlib level 6 is what Beam's WriteToTFRecord uses.
DEFAULT_LEVEL = {"isal": 2, "zlib": 6}
_LEVELS = {"isal": range(0, 4), "zlib": range(0, 10)}
SHARD_TEMPLATE = "-SSSSS-of-NNNNN"

_BEAM_COMPRESSION = {
    "gzip": CompressionTypes.GZIP,
    "zlib": CompressionTypes.DEFLATE,
    "none": CompressionTypes.UNCOMPRESSED,
}
_SUFFIX = {"gzip": ".tfrecord.gz", "zlib": ".tfrecord.deflate", "none": ".tfrecord"}


def file_suffix(compression: str) -> str:
    return _SUFFIX[compression]


def check_level(backend: str, level: int | None) -> int:
    """The level to use (the backend's default for None); raises for one it does not have."""
    if backend not in GZIP_BACKENDS:
        raise ValueError(f"gzip backend {backend!r} is not one of {list(GZIP_BACKENDS)}")
    if level is None:
        return DEFAULT_LEVEL[backend]
    if level not in _LEVELS[backend]:
        levels = _LEVELS[backend]
        raise ValueError(
            f"{backend} has compression levels {levels.start}-{levels.stop - 1}, not {level}"
        )
    return level


def gzip_compressor(level: int | None, backend: str) -> Callable[[memoryview], bytes]:
    """A function that turns one block into one complete gzip member."""
    level = check_level(backend, level)
    if backend == "isal":
        from isal import isal_zlib

        return lambda data: isal_zlib.compress(data, level, wbits=31)
    return lambda data: zlib.compress(data, level, wbits=31)


class _FramedBlockSink(filebasedsink.FileBasedSink):
    """Writes EncodedBatch blocks of framed records as they are (gzip: one member per block)."""

    def __init__(
        self, prefix: str, compression: str, num_shards: int, level: int | None, backend: str
    ) -> None:
        # Gzip is applied per block here; zlib streams through Beam's compressed file handle.
        handle_compression = (
            CompressionTypes.DEFLATE if compression == "zlib" else (CompressionTypes.UNCOMPRESSED)
        )
        super().__init__(
            file_path_prefix=prefix,
            coder=coders.BytesCoder(),
            file_name_suffix=file_suffix(compression),
            num_shards=num_shards,
            shard_name_template=SHARD_TEMPLATE,
            mime_type="application/octet-stream",
            compression_type=handle_compression,
        )
        self._gzip = compression == "gzip"
        self._level = level
        self._backend = backend
        self._compress: Callable[[memoryview], bytes] | None = None

    def write_record(self, file_handle, value: EncodedBatch) -> None:  # noqa: ANN001
        if not value.framed:
            raise ValueError("the blocks sink needs framed records (EncodeExamples(framed=True))")
        data = memoryview(value.buffer)
        if self._gzip:
            if self._compress is None:
                self._compress = gzip_compressor(self._level, self._backend)
            data = self._compress(data)
        file_handle.write(data)


class WriteShards(beam.PTransform):
    """EncodedBatch -> shard files `<prefix>-SSSSS-of-NNNNN<suffix>`; outputs their paths."""

    def __init__(
        self,
        prefix: str,
        compression: str = "gzip",
        num_shards: int = 0,
        sink: str = "blocks",
        level: int | None = None,
        backend: str = "isal",
    ) -> None:
        super().__init__()
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r} is not one of {list(COMPRESSIONS)}")
        if sink not in SINKS:
            raise ValueError(f"sink {sink!r} is not one of {list(SINKS)}")
        check_level(backend, level)
        self._prefix = prefix
        self._compression = compression
        self._num_shards = num_shards
        self._sink = sink
        self._level = level
        self._backend = backend

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        if self._sink == "blocks":
            sink = _FramedBlockSink(
                self._prefix, self._compression, self._num_shards, self._level, self._backend
            )
            return batches | "WriteBlocks" >> Write(sink)  # str: final shard paths
        return (
            batches
            | "SplitRecords" >> beam.FlatMap(EncodedBatch.records)  # bytes per record
            | "WriteToTFRecord"
            >> WriteToTFRecord(
                self._prefix,
                file_name_suffix=file_suffix(self._compression),
                num_shards=self._num_shards,
                shard_name_template=SHARD_TEMPLATE,
                compression_type=_BEAM_COMPRESSION[self._compression],
            )
        )
