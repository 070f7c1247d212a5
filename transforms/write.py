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
    "file_suffix",
    "gzip_compressor",
]

COMPRESSIONS = ("gzip", "zlib", "none")
SINKS = ("blocks", "tfrecordio")
GZIP_BACKENDS = ("zlib", "isal")
SHARD_TEMPLATE = "-SSSSS-of-NNNNN"

_BEAM_COMPRESSION = {
    "gzip": CompressionTypes.GZIP,
    "zlib": CompressionTypes.DEFLATE,
    "none": CompressionTypes.UNCOMPRESSED,
}
_SUFFIX = {"gzip": ".tfrecord.gz", "zlib": ".tfrecord.deflate", "none": ".tfrecord"}


def file_suffix(compression: str) -> str:
    return _SUFFIX[compression]


def gzip_compressor(level: int, backend: str) -> Callable[[memoryview], bytes]:
    """A function that turns one block into one complete gzip member."""
    if backend == "isal":
        from isal import isal_zlib  # imported here: an optional, faster backend

        isal_level = max(0, min(3, level))
        return lambda data: isal_zlib.compress(data, isal_level, wbits=31)
    if backend != "zlib":
        raise ValueError(f"gzip backend {backend!r} is not one of {list(GZIP_BACKENDS)}")
    return lambda data: zlib.compress(data, level, wbits=31)


class _FramedBlockSink(filebasedsink.FileBasedSink):
    """Writes EncodedBatch blocks of framed records as they are (gzip: one member per block)."""

    def __init__(
        self, prefix: str, compression: str, num_shards: int, level: int, backend: str
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
        level: int = 6,
        backend: str = "zlib",
    ) -> None:
        super().__init__()
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r} is not one of {list(COMPRESSIONS)}")
        if sink not in SINKS:
            raise ValueError(f"sink {sink!r} is not one of {list(SINKS)}")
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
