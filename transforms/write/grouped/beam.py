"""The grouped write's DoFns: thin wrappers of grouped/pieces.py for `WriteShards`
(transforms/write/beam.py): `ToShardsFn` spills a bundle's batches and emits the references at
the end of the bundle, `WriteShardFn` writes one shard from its grouped references."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.encode.records import EncodedBatch
from transforms.write.files import ShardPart, block_compressor
from transforms.write.grouped.pieces import ShardSpiller, SpillRef, write_shard
from transforms.write.grouped.spill import DEFAULT_BUCKETS
from transforms.write.progress import SinkProgress

__all__ = ["ToShardsFn", "WriteShardFn"]


@beam.typehints.with_input_types(EncodedBatch)
@beam.typehints.with_output_types(tuple[int, SpillRef])
class ToShardsFn(beam.DoFn):
    """EncodedBatch -> (shard index, where the batch's records for that shard were spilled):
    a PieceRef (the piece framed, or with gzip a gzip member when large enough), or with a seed
    a BucketRef (the shard's records by bucket, with their keys)."""

    def __init__(
        self,
        num_shards: int,
        seed: int | None,
        temp_dir: str,
        split: str = "train",
        compression: str = "none",
        level: int | None = None,
        backend: str = "isal",
        buckets: int = DEFAULT_BUCKETS,
        member_bytes: int | None = None,
    ) -> None:
        self._args = (
            num_shards, seed, temp_dir, split, compression, level, backend, buckets, member_bytes,
        )  # fmt: skip

    def start_bundle(self) -> None:
        self._spiller = ShardSpiller(*self._args)
        self._out: list[tuple[int, SpillRef]] = []

    def process(self, batch: EncodedBatch) -> None:
        """Spills the batch; its references are emitted at the end of the bundle."""
        self._out.extend(self._spiller.spill(batch))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        # The references leave the bundle only once their spill files are closed (complete).
        self._spiller.close()
        for element in self._out:
            yield WindowedValue(element, MIN_TIMESTAMP, [GlobalWindow()])
        self._out = []


@beam.typehints.with_input_types(tuple[int, Iterable[SpillRef]])
@beam.typehints.with_output_types(ShardPart)
class WriteShardFn(beam.DoFn):
    """(shard index, where its pieces were spilled) -> ShardPart (pieces.write_shard).
    `progress_dir`: where it reports what it has written (write/progress.py); None: nowhere."""

    def __init__(
        self, split: str, temp_dir: str, compression: str, level: int | None, backend: str,
        seed: int | None, progress_dir: str | None = None, member_bytes: int | None = None,
    ) -> None:  # fmt: skip
        self._member_bytes = member_bytes
        self._split, self._temp_dir = split, temp_dir
        self._compression, self._level, self._backend = compression, level, backend
        self._seed = seed
        self._progress_dir = progress_dir

    def setup(self) -> None:
        self._compress = block_compressor(
            self._compression, self._level, self._backend, self._member_bytes
        )
        self._progress = None
        if self._progress_dir is not None:
            self._progress = SinkProgress(self._progress_dir, self._split)

    def process(self, element: tuple[int, Iterable[SpillRef]]) -> Iterator[ShardPart]:
        shard, refs = element
        told = None if self._progress is None else self._progress.add
        yield write_shard(
            shard, list(refs), self._split, self._temp_dir, self._compression, self._compress,
            self._seed, told,
        )  # fmt: skip

    def finish_bundle(self) -> None:
        if self._progress is not None:
            self._progress.flush()
