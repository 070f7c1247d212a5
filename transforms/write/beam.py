"""The sinks: encoded batches of one split -> its final shard files.

`WriteShards` picks how (see files.py, rolling.py, grouped.py and finalize.py beside it):
- sink "blocks" (default): batches arrive already framed (length, masked crc32c, data, masked
  crc32c per record) and are written as blocks, gzip one member per block.
  - by default each ReadTask's rows are written where they are encoded, in files of the target
    size (tasks as sizing.py planned them): no shuffle, shards of even size;
  - with `num_shards` > 0, or a shuffle seed, every batch is cut into one piece per shard,
    spilled to a file in the temp directory, and the pieces' places meet by shard (a GroupByKey):
    exactly `num_shards` files, or a seeded global shuffle sorted a bucket group at a time.
  Temp files go to `temp_dir` and are renamed into place once all are written.
- sink "tfrecordio": Beam's WriteToTFRecord, one element per record (Beam frames each record;
  Beam's own sharding: `num_shards`, or 0 for the runner's choice).
"""

from __future__ import annotations

import uuid

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.tfrecordio import WriteToTFRecord

from transforms.encode.records import EncodedBatch
from transforms.names import SINKS
from transforms.write.compression import (
    COMPRESSIONS,
    GZIP_BACKENDS,
    check_level,
    file_suffix,
    gzip_compressor,
)
from transforms.write.files import ShardFile
from transforms.write.finalize import finalize_shards
from transforms.write.grouped.beam import ToShardsFn, WriteShardFn
from transforms.write.grouped.spill import buckets_per_shard
from transforms.write.rolling.beam import RollingWriteFn

__all__ = [
    "COMPRESSIONS",
    "GZIP_BACKENDS",
    "SINKS",
    "WriteShards",
    "check_level",
    "file_suffix",
    "gzip_compressor",
]

SHARD_TEMPLATE = "-SSSSS-of-NNNNN"
DEFAULT_TARGET_BYTES = 128 << 20

_BEAM_COMPRESSION = {
    "gzip": CompressionTypes.GZIP,
    "zlib": CompressionTypes.DEFLATE,
    "none": CompressionTypes.UNCOMPRESSED,
}


def _tfrecordio_shard(path: str, split: str) -> ShardFile:
    return ShardFile(split, path, None, None)


@beam.typehints.with_input_types(EncodedBatch)
@beam.typehints.with_output_types(ShardFile)
class WriteShards(beam.PTransform):
    """EncodedBatch of split `split` -> ShardFile per final shard `<prefix>-SSSSS-of-NNNNN...`.

    `progress_dir`: where the blocks sink's writers report what they have written
    (write/progress.py; None: no reports).

    `target_bytes`: the size at which the rolling write starts a new file; `num_shards` > 0
    or `shuffle_seed`: a grouped write into exactly `num_shards` files; `temp_dir`: where the
    blocks sink writes before it renames (a directory of the output, unique to the run, that
    the caller removes; by default one beside `prefix` that this transform removes; the grouped
    write spills its records there); `estimated_bytes`: the planned size of the output (all
    splits, as stored), from which a shuffle cuts each shard's key range into buckets of a
    bounded size (0: shards up to about 1 GiB of framed records stay bounded); `suffix`: what
    shard names end with (default: by compression, transforms/write/layout.py); `member_bytes`:
    gzip members of about that many framed bytes (an indexed output, transforms/write/index.py).
    """

    def __init__(
        self,
        prefix: str,
        split: str = "train",
        compression: str = "gzip",
        num_shards: int = 0,
        sink: str = "blocks",
        level: int | None = None,
        backend: str = "isal",
        progress_dir: str | None = None,
        temp_dir: str | None = None,
        shuffle_seed: int | None = None,
        target_bytes: int = DEFAULT_TARGET_BYTES,
        estimated_bytes: int = 0,
        suffix: str | None = None,
        member_bytes: int | None = None,
    ) -> None:
        super().__init__()
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r} is not one of {list(COMPRESSIONS)}")
        if sink not in SINKS:
            raise ValueError(f"sink {sink!r} is not one of {list(SINKS)}")
        if shuffle_seed is not None and num_shards < 1:
            raise ValueError("a shuffled write needs the number of shards")
        if sink == "tfrecordio" and shuffle_seed is not None:
            raise ValueError("the tfrecordio sink does not shuffle; use the blocks sink")
        check_level(backend, level)
        self._prefix = prefix
        self._split = split
        self._compression = compression
        self._num_shards = num_shards
        self._sink = sink
        self._level = level
        self._backend = backend
        self._progress_dir = progress_dir
        self._own_temp_dir = temp_dir is None
        self._temp_dir = temp_dir or f"{prefix}-temp-{uuid.uuid4().hex[:16]}"
        self._seed = shuffle_seed
        self._target = target_bytes
        self._estimated = estimated_bytes
        self._suffix = file_suffix(compression) if suffix is None else suffix
        self._member_bytes = member_bytes

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        if self._sink == "tfrecordio":
            return (
                batches
                | "SplitRecords" >> beam.FlatMap(EncodedBatch.records)  # bytes per record
                | "WriteToTFRecord"
                >> WriteToTFRecord(
                    self._prefix,
                    file_name_suffix=self._suffix,
                    num_shards=self._num_shards,
                    shard_name_template=SHARD_TEMPLATE,
                    compression_type=_BEAM_COMPRESSION[self._compression],
                )  # str: final shard path
                | "Shards" >> beam.Map(_tfrecordio_shard, self._split)
            )
        args = (self._split, self._temp_dir, self._compression, self._level, self._backend)
        if self._num_shards > 0:
            to_shards = ToShardsFn(
                self._num_shards,
                self._seed,
                self._temp_dir,
                self._split,
                self._compression,
                self._level,
                self._backend,
                buckets_per_shard(self._estimated, self._num_shards),
                self._member_bytes,
            )
            parts = (
                batches
                | "ToShards" >> beam.ParDo(to_shards)
                # (shard index, PieceRef or BucketRef: where the records lie in a spill file)
                | "GroupByShard" >> beam.GroupByKey()  # (shard index, [refs])
                | "WriteShard"
                >> beam.ParDo(
                    WriteShardFn(*args, self._seed, self._progress_dir, self._member_bytes)
                )  # ShardPart
            )
        else:
            writer = RollingWriteFn(*args, self._target, self._progress_dir, self._member_bytes)
            parts = batches | "WriteParts" >> beam.ParDo(writer)  # ShardPart (temp file)
        return (
            batches.pipeline
            | "Once" >> beam.Create([None])
            | "Finalize"
            >> beam.FlatMap(
                finalize_shards,
                beam.pvalue.AsList(parts),
                self._split,
                self._prefix,
                self._compression,
                self._num_shards,
                self._temp_dir,
                self._own_temp_dir,
                self._suffix,
            )  # ShardFile
        )
