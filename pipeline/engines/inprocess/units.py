"""What one worker does with one piece of work, as plain functions of a `Job` (the plan and
what was made from it once, in the launcher, before the workers fork).

The pieces of work, each a phase of the job (pipeline/engines/inprocess/engine.py):
- a `Unit` (one work item of one read task: a Parquet row group, a CSV or JSON Lines file):
  `fit_unit` adds its rows to an analysis pass; `convert_unit` reads, splits, preprocesses,
  reads its `files:` columns and encodes it, and writes or spills its records (`UnitOutput`);
- the pieces after the convert phase (a task's spilled blocks, a grouped sequence's bucket, a
  shard of a grouped write): after_convert.py.

They call the functions the Beam job's DoFns call (transforms/convert.py, transforms/write/,
transforms/sequence/, transforms/stats/), so the records are the Beam job's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pipeline.engines.inprocess.pool import work_item_error
from pipeline.job.plan import JobPlan
from transforms.batch import TableBatch
from transforms.convert import Conversion, EncodedRows
from transforms.deadletter import isolate_bad_rows
from transforms.encode.records import BatchStats, EncodedBatch
from transforms.preprocess.chain import analysis_inputs
from transforms.read.work import ReadTask, WorkItem, read_work_item
from transforms.sequence.spill import RowsRef, spill_batch
from transforms.stats.accumulator import StatisticsAccumulator
from transforms.write.files import BlockFile, ShardPart, block_compressor, temp_path
from transforms.write.grouped.pieces import ShardSpiller, SpillRef
from transforms.write.grouped.spill import SpillWriter, buckets_per_shard
from transforms.write.progress import SinkProgress
from transforms.write.rolling.blocks import BlockRef, BlockSpill
from transforms.write.rolling.task_files import TaskFiles

__all__ = [
    "BadRows",
    "Job",
    "Unit",
    "UnitOutput",
    "convert_task",
    "convert_unit",
    "describe_unit",
    "fit_unit",
    "merge_output",
    "plan_units",
]

BadRows = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Unit:
    """One work item of read task `task`: the smallest piece of work a worker takes."""

    task: int
    item: WorkItem


def plan_units(plan: JobPlan) -> list[Unit]:
    """Every work item, in the order one worker would read them: task by task."""
    return [Unit(task.index, item) for task in plan.shards.tasks for item in task.items]


def describe_unit(unit: Unit) -> str:
    """The work item, as an error names it."""
    item = unit.item
    if item.rows is not None:
        start, stop = item.rows
        return f"{item.path} (rows {start:,} to {'the end' if stop is None else f'{stop - 1:,}'})"
    if item.row_group is None:
        return item.path
    if item.row_groups > 1:
        return f"{item.path} (row groups {item.row_group}-{item.row_group + item.row_groups - 1})"
    return f"{item.path} (row group {item.row_group})"


@dataclasses.dataclass(frozen=True)
class Grouping:
    """How a split is written: rolling (num_shards 0), or grouped into `num_shards` shards,
    shuffled with `seed` (None: no shuffle), its key range cut into `buckets` per shard."""

    num_shards: int = 0
    seed: int | None = None
    buckets: int = 1


class Job:
    """The job as every worker sees it: the plan, the conversion, the fitted analyzers, where
    temp files go; and, per process, the compressor and the progress reports."""

    def __init__(self, plan: JobPlan, temp_dir: str, progress_dir: str | None) -> None:
        config = plan.config
        self.plan = plan
        self.conversion: Conversion = plan.conversion()
        self.splits = self.conversion.splits
        self.temp_dir = temp_dir
        self.progress_dir = progress_dir
        self.prepared: Mapping[int, Any] = {}  # the fitted analyzers, prepared
        self.statistics = config.stats and plan.sequence is None  # Examples only, as build.py
        self.grouped_sequence = plan.sequence is not None and plan.sequence.grouped
        self.grouping: dict[str, Grouping] = {}
        for name, _ in self.splits:
            shuffled = name in config.shuffle
            shards = config.num_shards or (plan.shards.num_shards[name] if shuffled else 0)
            seed = config.shuffle_seed if shuffled else None
            buckets = buckets_per_shard(plan.shards.estimated_bytes, shards) if shards else 1
            self.grouping[name] = Grouping(shards, seed, buckets)
        self._pid = -1
        self._compress: Callable[[memoryview], bytes] | None = None
        self._progress: dict[str, SinkProgress | None] = {}
        self._open: dict[str, TaskFiles] = {}  # serial rolling write: the task being read
        self._open_task = -1

    # -- per process -------------------------------------------------------------------------

    def _local(self) -> None:
        """Make this process's compressor and progress reports (a forked worker makes its own)."""
        if self._pid == os.getpid():
            return
        config = self.plan.config
        self._pid = os.getpid()
        self._compress = block_compressor(
            config.compression, config.compression_level, config.gzip_backend,
            config.member_bytes(),
        )  # fmt: skip
        self._progress = {
            name: None if self.progress_dir is None else SinkProgress(self.progress_dir, name)
            for name, _ in self.splits
        }

    def compress(self) -> Callable[[memoryview], bytes] | None:
        self._local()
        return self._compress

    def progress(self, split: str) -> SinkProgress | None:
        self._local()
        return self._progress[split]

    def flush_progress(self) -> None:
        for progress in self._progress.values():
            if progress is not None:
                progress.flush()

    def task_files(self, split: str, task: int, report: bool = True) -> TaskFiles:
        """A rolling write's files of `task` for `split` (as RollingWriteFn makes them);
        `report`: told to the progress reports as blocks are written."""
        compression = self.plan.config.compression
        progress = self.progress(split) if report else None
        compress = self.compress()

        def new_file(seq: int) -> BlockFile:
            order = (task, seq)
            path = temp_path(self.temp_dir, split, order, compression)
            told = None if progress is None else progress.add
            return BlockFile(path, compression, compress, order, split, told)

        return TaskFiles(new_file, self.plan.shards.target_bytes)

    def shard_spiller(self, split: str) -> ShardSpiller:
        """A grouped split's spiller (ToShardsFn's work)."""
        grouping, config = self.grouping[split], self.plan.config
        return ShardSpiller(
            grouping.num_shards, grouping.seed, self.temp_dir, split, config.compression,
            config.compression_level, config.gzip_backend, grouping.buckets,
            config.member_bytes(),
        )  # fmt: skip

    # -- the serial rolling write: one task's files open at a time ---------------------------

    def close_task(self) -> dict[str, list[ShardPart]]:
        """Close the open task's files (serial runs); their parts."""
        parts = {split: files.close() for split, files in self._open.items()}
        self._open, self._open_task = {}, -1
        self.flush_progress()
        return parts

    def _write_rolling(self, split: str, task: int, records: EncodedBatch) -> list[ShardPart]:
        if task != self._open_task:
            if self._open:
                raise RuntimeError("a task's files were left open (close_task)")
            self._open_task = task
        files = self._open.get(split)
        if files is None:
            files = self._open[split] = self.task_files(split, task)
        return files.write(records)


def _read(job: Job, unit: Unit, on_bad: Callable[[dict], None]) -> Iterator[TableBatch]:
    """The batches of one work item, as the job's ReadTable gives them."""
    plan, config = job.plan, job.plan.config
    for batch in read_work_item(
        unit.item, plan.fmt, plan.schema, config.csv, config.batch_rows, on_bad=on_bad
    ):
        yield dataclasses.replace(batch, task=unit.task)


# -- fitting -------------------------------------------------------------------------------


def fit_unit(job: Job, analyze: Any, level: int, prepared: Mapping[int, Any], unit: Unit) -> Any:
    """The accumulator of analysis pass `level` over one work item (Analyze's work): its fit
    rows (every row, or the fit split's); rows a step fails on are left out (the full run
    dead-letters them)."""
    plan = job.plan
    steps = plan.preprocess
    acc = analyze.create_accumulator()
    for batch in _read(job, unit, lambda row: None):  # the full run reports bad rows
        parts = [batch]
        if plan.fit_split is not None:
            parts = [p for p in job.conversion.split(batch)[0] if p.split == plan.fit_split]
        for part in parts:
            columns, _ = isolate_bad_rows(
                part, lambda b: analysis_inputs(steps, level, b, prepared), "transform"
            )
            if columns is not None:
                acc = analyze.add_input(acc, columns)
    return acc


# -- converting ----------------------------------------------------------------------------


@dataclasses.dataclass
class UnitOutput:
    """What converting one work item gave: counts, bad rows, statistics, and where its records
    went: rolling files closed meanwhile (serial), spilled blocks (workers > 1), pieces of
    grouped splits, or rows of a grouped sequence."""

    counts: BatchStats = dataclasses.field(default_factory=lambda: BatchStats(0, {}))
    bad: BadRows = dataclasses.field(default_factory=list)
    statistics: StatisticsAccumulator | None = None
    parts: dict[str, list[ShardPart]] = dataclasses.field(default_factory=dict)
    blocks: dict[str, list[BlockRef]] = dataclasses.field(default_factory=dict)
    pieces: dict[str, list[tuple[int, SpillRef]]] = dataclasses.field(default_factory=dict)
    rows: list[tuple[tuple[int, int], RowsRef]] = dataclasses.field(default_factory=list)


def convert_unit(job: Job, unit: Unit, spill_blocks: bool = True) -> UnitOutput:
    """Read, split, preprocess, read the files of and encode one work item; write its records
    of each rolling split into its task's files (`spill_blocks` False: the task is this
    worker's), or spill them (blocks for the rolling splits, pieces by shard for grouped ones,
    rows by bucket for a grouped sequence)."""
    conversion = job.conversion
    out = UnitOutput()
    if job.statistics:
        out.statistics = StatisticsAccumulator(job.plan.specs)
    block_spills: dict[str, BlockSpill] = {}
    spillers: dict[str, ShardSpiller] = {}
    row_spills: dict[str, SpillWriter] = {}
    for batch in _read(job, unit, out.bad.append):
        parts, failed = conversion.split(batch)
        out.bad += failed
        for part in parts:
            rows, failed = conversion.transform(part, job.prepared)
            out.bad += failed
            if rows is None:
                continue
            if job.grouped_sequence:
                _spill_rows(job, rows, row_spills, out)
                continue
            for read, failed in conversion.read_files(rows):  # parts of bounded size
                out.bad += failed
                if read is None:
                    continue
                encoded, failed = conversion.encode(read)
                out.bad += failed
                if encoded is not None:
                    _add_encoded(job, unit, encoded, spill_blocks, block_spills, spillers, out)
    for name, spill in block_spills.items():
        out.blocks[name] = spill.close()
    for spiller in spillers.values():
        spiller.close()
    for spill in row_spills.values():
        spill.close()
    job.flush_progress()
    return out


def _add_encoded(
    job: Job,
    unit: Unit,
    encoded: EncodedRows,
    spill_blocks: bool,
    block_spills: dict[str, BlockSpill],
    spillers: dict[str, ShardSpiller],
    out: UnitOutput,
) -> None:
    """One encoded batch: its records written or spilled by split, its counts and statistics
    added to `out`."""
    splits = job.splits
    for name, records in encoded.by_split(splits):
        _write(job, unit, name, records, spill_blocks, block_spills, spillers, out)
    s = encoded.stats
    out.counts = out.counts.merge(BatchStats(s.rows, s.nulls, encoded.split_rows(splits), s.steps))
    if out.statistics is not None:
        for name, split_rows in encoded.batches_by_split(splits):
            out.statistics.add(name, split_rows)


def convert_task(job: Job, task: ReadTask) -> UnitOutput:
    """A whole read task on this worker: its work items in order, the rolling files written as
    they go (no blocks to assemble), the statistics folded over its items in their order."""
    out = UnitOutput()
    for item in task.items:
        unit = Unit(task.index, item)
        try:
            got = convert_unit(job, unit, spill_blocks=False)
        except Exception as err:  # the one-line error names the work item, not the task
            raise work_item_error(describe_unit(unit), err) from err
        merge_output(out, got)
    for name, parts in job.close_task().items():
        out.parts.setdefault(name, []).extend(parts)
    return out


def merge_output(into: UnitOutput, got: UnitOutput) -> None:
    """Add `got` (the next work item's output, in the plan's order) to `into`."""
    into.counts = into.counts.merge(got.counts)
    into.bad += got.bad
    if got.statistics is not None:
        if into.statistics is None:
            into.statistics = got.statistics
        else:
            into.statistics.merge(got.statistics)
    for name, parts in got.parts.items():
        into.parts.setdefault(name, []).extend(parts)
    for name, blocks in got.blocks.items():
        into.blocks.setdefault(name, []).extend(blocks)
    for name, pieces in got.pieces.items():
        into.pieces.setdefault(name, []).extend(pieces)
    into.rows += got.rows


def _write(
    job: Job,
    unit: Unit,
    name: str,
    records: EncodedBatch,
    spill_blocks: bool,
    block_spills: dict[str, BlockSpill],
    spillers: dict[str, ShardSpiller],
    out: UnitOutput,
) -> None:
    """One split's records of a batch: written (serial rolling), or spilled."""
    grouping = job.grouping[name]
    config = job.plan.config
    if grouping.num_shards > 0:
        spiller = spillers.get(name)
        if spiller is None:
            spiller = spillers[name] = job.shard_spiller(name)
        out.pieces.setdefault(name, []).extend(spiller.spill(records))
    elif spill_blocks:
        spill = block_spills.get(name)
        if spill is None:
            spill = block_spills[name] = BlockSpill(
                job.temp_dir, name, config.compression, job.compress()
            )
        ref = spill.add(records)
        progress = job.progress(name)
        if progress is not None:
            progress.add(ref.rows, ref.size)
    else:
        out.parts.setdefault(name, []).extend(job._write_rolling(name, unit.task, records))


def _spill_rows(
    job: Job, batch: TableBatch, spills: dict[str, SpillWriter], out: UnitOutput
) -> None:
    """A grouped sequence's rows of a batch, spilled by bucket of their key (SpillRowsFn)."""
    if batch.table.num_rows == 0:
        return
    names = [name for name, _ in job.splits]
    split = batch.split or names[0]
    if split not in spills:  # named by split: finalize_shards removes them
        spills[split] = SpillWriter(job.temp_dir, f"{split}-rows")
    layout = job.conversion.sequence
    refs = spill_batch(
        batch, layout.columns(), layout.options.group_by, job.plan.sequence_buckets, spills[split]
    )
    index = names.index(split)
    out.rows.extend(((index, bucket), ref) for bucket, ref in refs)
