"""The pieces of work after the convert phase (pipeline/engines/inprocess/engine.py), each a
plain function of the `Job` (units.py):
- a task's spilled blocks: `assemble_task` writes the task's rolling files (workers > 1);
- a grouped sequence's bucket: `encode_bucket` encodes its sequences and writes or spills them;
- a shard of a grouped write: `write_grouped_shard` writes it from its spilled pieces; with a
  shuffle on several workers, `slice_shard` cuts it into slices, `write_grouped_slice` writes
  each, `assemble_grouped_shard` joins them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pipeline.engines.inprocess.units import BadRows, Job
from transforms.encode.records import BatchStats
from transforms.sequence.encode import encode_groups
from transforms.sequence.spill import RowsRef, read_bucket
from transforms.write.files import ShardPart
from transforms.write.grouped.pieces import SpillRef, write_shard
from transforms.write.grouped.slices import (
    Slice,
    SliceOut,
    assemble_shard,
    can_slice,
    plan_slices,
    write_slice,
)
from transforms.write.rolling.blocks import BlockReader, BlockRef

__all__ = [
    "Bucket",
    "BucketOutput",
    "Shard",
    "ShardSlices",
    "TaskBlocks",
    "assemble_grouped_shard",
    "assemble_task",
    "encode_bucket",
    "slice_shard",
    "write_grouped_shard",
    "write_grouped_slice",
]


# -- the rolling files of a task, from its blocks (workers > 1) ----------------------------


@dataclasses.dataclass(frozen=True)
class TaskBlocks:
    """One split's spilled blocks of one task, in the order one worker would write them."""

    split: str
    task: int
    blocks: tuple[BlockRef, ...]


def assemble_task(job: Job, item: TaskBlocks) -> list[ShardPart]:
    """The task's rolling files of the split, from its blocks: byte for byte the files one
    worker writes from the batches (TaskFiles.write_block)."""
    files = job.task_files(item.split, item.task, report=False)  # told as they were spilled
    parts: list[ShardPart] = []
    blocks = BlockReader()
    try:
        for ref in item.blocks:
            parts += files.write_block(ref, blocks)
        parts += files.close()
    finally:
        blocks.close()
    return parts


# -- grouped sequences ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A grouped sequence's bucket of one split: where its rows were spilled."""

    split_index: int
    bucket: int
    refs: tuple[RowsRef, ...]


@dataclasses.dataclass
class BucketOutput:
    counts: BatchStats
    bad: BadRows
    parts: list[ShardPart]
    pieces: list[tuple[int, SpillRef]]


def encode_bucket(job: Job, item: Bucket) -> BucketOutput:
    """The bucket's SequenceExamples (EncodeGroups' work), written as the bucket's task (rolling)
    or spilled by shard (a grouped write)."""
    conversion = job.conversion
    rows = read_bucket(list(item.refs))
    encoded, stats, bad = encode_groups(rows, conversion.sequence, conversion.framed)
    name = conversion.splits[item.split_index][0]
    split_rows = {name: stats.rows} if stats.rows else {}
    out = BucketOutput(BatchStats(stats.rows, stats.nulls, split_rows, stats.steps), bad, [], [])
    if encoded is None:
        return out
    # The bucket is the writer's task: one bucket's records stay together.
    records = dataclasses.replace(encoded, task=item.bucket, first_row=item.bucket)
    if job.grouping[name].num_shards > 0:
        spiller = job.shard_spiller(name)
        out.pieces = spiller.spill(records)
        spiller.close()
    else:
        files = job.task_files(name, item.bucket)
        out.parts = files.write(records) + files.close()
    job.flush_progress()
    return out


# -- grouped writes ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard of a grouped split: where its records were spilled."""

    split: str
    shard: int
    refs: tuple[SpillRef, ...]


def slice_shard(job: Job, item: Shard, workers: int) -> list[Slice]:
    """The shard cut into slices that workers write at once (grouped/slices.py), or [] where
    it is written whole: without a shuffle, with zlib, or where the split has shards enough
    to keep every worker busy (2 per worker). A slice's blocks are spilled, then copied into
    the shard: I/O worth paying only where a worker would otherwise wait (3 shards on 2
    workers take two rounds whole)."""
    grouping = job.grouping[item.split]
    if grouping.seed is None or not can_slice(job.plan.config.compression):
        return []
    if workers <= 1 or grouping.num_shards >= 2 * workers:
        return []
    return plan_slices(item.split, item.shard, item.refs)


def _told(job: Job, split: str) -> Callable[[int, int], None] | None:
    """What a writer tells (records, bytes) as it writes: this process's progress report."""
    progress = job.progress(split)
    return None if progress is None else progress.add


def write_grouped_slice(job: Job, item: Slice) -> SliceOut:
    """One slice of a shuffled shard, its blocks spilled."""
    compression = job.plan.config.compression
    out = write_slice(item, job.temp_dir, compression, job.compress(), _told(job, item.split))
    job.flush_progress()
    return out


@dataclasses.dataclass(frozen=True)
class ShardSlices:
    """A shuffled shard's slices, written: what `assemble_grouped_shard` joins."""

    split: str
    shard: int
    outs: tuple[SliceOut, ...]


def assemble_grouped_shard(job: Job, item: ShardSlices) -> ShardPart:
    """The shard's temp file from its written slices: the bytes write_shard writes."""
    compression = job.plan.config.compression
    part = assemble_shard(item.split, item.shard, item.outs, job.temp_dir, compression,
                          job.compress(), _told(job, item.split))  # fmt: skip
    job.flush_progress()
    return part


def write_grouped_shard(job: Job, item: Shard) -> ShardPart:
    """The shard's temp file from its spilled pieces (WriteShardFn's work)."""
    part = write_shard(
        item.shard, item.refs, item.split, job.temp_dir, job.plan.config.compression,
        job.compress(), job.grouping[item.split].seed, _told(job, item.split),
    )  # fmt: skip
    job.flush_progress()
    return part
