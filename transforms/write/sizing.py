"""How many shards, and which worker writes which rows: planned at construction, from the input's
sizes and a sample of the output.

Without a shuffle the job writes its shards where the rows are encoded, so that no record crosses
the network. The work items (Parquet row groups, CSV files) are grouped into `ReadTask`s of about
equal estimated output; one worker reads a task in order and writes its rows of each split into
files of the planned part size, rolling to a new file when one is full (write/rolling.py).
Tasks of equal size give shards of equal size, whatever the runner does with bundles.

The estimate: output bytes = (the input's bytes of each work item: a row group's uncompressed
size from the Parquet footer, a whole Parquet file's or a CSV file's size on disk) x (output
bytes per input byte, measured by encoding and compressing the first batch of the first file;
for whole Parquet files, per byte on disk: the first file's estimated output over its size).
Only the ratio is a guess; its error scales every task alike, so it moves shard sizes away from
the target but keeps them even.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from transforms.batch import TableBatch
from transforms.encode.records import encode_table
from transforms.encode.schema import ConversionError, FeatureSpec
from transforms.fs import CompressionTypes, FileSystems
from transforms.read.work import ReadTask, WorkItem

__all__ = [
    "DEFAULT_SHARD_MB",
    "MAX_TASK_SHARDS",
    "MIN_TASKS",
    "ShardPlan",
    "compressed_size",
    "csv_bytes_per_row",
    "output_bytes_per_input_byte",
    "plan_shards",
    "plan_tasks",
]

DEFAULT_SHARD_MB = 128  # TFDS aims at 128 MiB too: large enough for fast reads, small enough to
# spread over readers and hosts
MIN_TASKS = 8  # tasks the plan keeps, when the input allows files of a quarter of the target
MAX_TASK_SHARDS = 16  # a task writes at most this many target-size files of its largest split
_MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """What the writer needs: the tasks (a rolling write) and the target size, or the number
    of shards per split (a grouped write: `num_shards` or a shuffle)."""

    tasks: tuple[ReadTask, ...]
    num_shards: Mapping[str, int]  # split -> shards of a grouped write
    estimated_bytes: int  # the whole output, all splits
    bytes_per_input_byte: float
    target_bytes: int  # where the rolling writer starts a new file


def compressed_size(framed: np.ndarray, compress: Callable[[memoryview], bytes] | None) -> int:
    """Bytes a block of framed records takes in a shard (`compress`: None for no compression)."""
    if compress is None:
        return int(framed.nbytes)
    return len(compress(memoryview(framed)))


def _inflate_all(raw: bytes, inflate: zlib._Decompress) -> tuple[bytes, zlib._Decompress]:
    """Decompress `raw` (gzip, possibly several members); the state to go on with."""
    out = []
    while raw:
        out.append(inflate.decompress(raw))
        raw = b""
        if inflate.eof:
            raw, inflate = inflate.unused_data, zlib.decompressobj(wbits=47)
    return b"".join(out), inflate


def csv_bytes_per_row(path: str, header: bool, limit: int = 4 << 20) -> float:
    """Bytes of the file on disk (compressed, for .gz) per data row, from its first `limit`
    bytes of text (rows counted as lines: a quoted field over several lines counts more)."""
    inflate = zlib.decompressobj(wbits=47) if path.endswith(".gz") else None
    text_bytes = lines = consumed = 0
    last = b"\n"
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        while text_bytes < limit:
            raw = f.read(1 << 20)
            if not raw:
                break
            consumed += len(raw)
            text = raw
            if inflate is not None:
                try:
                    text, inflate = _inflate_all(raw, inflate)
                except zlib.error:  # a corrupt file: the run reports it, the sample stops here
                    break
            if text:
                text_bytes += len(text)
                lines += text.count(b"\n")
                last = text[-1:]
    lines += last != b"\n"
    rows = lines - (1 if header else 0)
    return consumed / rows if rows > 0 else float(max(consumed, 1))


def output_bytes_per_input_byte(
    item: WorkItem,
    sample: TableBatch | None,
    specs: Sequence[FeatureSpec] | None,
    compress: Callable[[memoryview], bytes] | None,
    csv_header: bool = True,
    file_rows: int | None = None,
    extra_row_bytes: float = 0.0,
) -> float:
    """Shard bytes per input byte, from `sample` (the first batch of `item`) encoded with
    `specs` and compressed with `compress`. 1.0 when there is nothing to measure it on (no
    sample, no specs for the source, a sample row that does not encode).

    `file_rows`: `item` is a whole Parquet file (`source_bytes` its size on disk) of that many
    rows (from its footer); the sample's share of the file's bytes is its share of the rows.
    `extra_row_bytes`: bytes each row gains after the sample's encoding (the files a `files:`
    column reads in; taken as they are, compressed or not)."""
    if sample is None or specs is None or sample.table.num_rows == 0 or item.source_bytes <= 0:
        return 1.0
    rows = sample.table.num_rows
    if file_rows:
        input_bytes = item.source_bytes * rows / file_rows
    elif item.num_rows:
        input_bytes = item.source_bytes * rows / item.num_rows
    else:
        input_bytes = csv_bytes_per_row(item.path, csv_header) * rows
    try:
        encoded, _ = encode_table(sample.table, specs, sample.source, sample.first_row, True)
    except ConversionError:
        return 1.0
    if input_bytes <= 0:
        return 1.0
    return (compressed_size(encoded.buffer, compress) + extra_row_bytes * rows) / input_bytes


def plan_tasks(sizes: Sequence[float], task_bytes: float) -> list[list[int]]:
    """Group consecutive work items (estimated output `sizes`) into tasks of about equal sums,
    each about `task_bytes` or more: total / task_bytes tasks (rounded down, at least 1); item i
    goes to the task its midpoint falls in."""
    n = len(sizes)
    if n == 0:
        return []
    held = np.maximum(np.asarray(sizes, dtype=np.float64), 0.0)
    total = float(held.sum())
    count = int(min(n, max(1, total // task_bytes))) if task_bytes > 0 and total > 0 else 1
    mid = np.cumsum(held) - held / 2
    owner = np.minimum((mid / max(total, 1e-300) * count).astype(np.int64), count - 1)
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(owner.tolist()):
        groups.setdefault(t, []).append(i)
    return [groups[t] for t in sorted(groups)]


def plan_shards(
    work: Sequence[WorkItem],
    bytes_per_input_byte: float,
    splits: Sequence[tuple[str, int]],
    shard_mb: float,
    num_shards: int = 0,
    grouped: bool = False,
) -> ShardPlan:
    """The shard plan for `work` (items with `source_bytes`), splits (name, weight) and the target
    shard size. `grouped`: the records are grouped by shard (a shuffle, or `num_shards` > 0,
    which fixes the shards per split): one task per work item, no rolling.

    The rolling writer starts a new file at `target_bytes`: `shard_mb`, or down to a quarter of
    it when the input is too small for MIN_TASKS tasks of two such files (fewer tasks than
    workers would slow the whole job down). A task holds two files' worth at least (room for
    the estimate to be off: a task that makes less than one file's worth makes one small file),
    and enough for one file of the smallest split, but less when that leaves fewer than
    MIN_TASKS tasks (the small split then gets a smaller file per task) and at most
    MAX_TASK_SHARDS files of the largest split (else a 99/1 split would leave a few huge tasks).
    """
    target = max(1, int(shard_mb * _MB))
    total_weight = sum(w for _, w in splits)
    fractions = {name: w / total_weight for name, w in splits}
    sizes = [item.source_bytes * bytes_per_input_byte for item in work]
    estimated = float(sum(sizes))
    smallest, largest = min(fractions.values()), max(fractions.values())
    limit = int(min(target, max(target / 4, estimated / (2 * MIN_TASKS))))
    task_bytes = max(
        2 * limit, min(limit / smallest, estimated / MIN_TASKS, MAX_TASK_SHARDS * limit / largest)
    )
    groups = [[i] for i in range(len(work))] if grouped else plan_tasks(sizes, task_bytes)
    tasks = tuple(ReadTask(t, tuple(work[i] for i in group)) for t, group in enumerate(groups))
    if num_shards > 0:
        shards = {name: num_shards for name in fractions}
    else:
        shards = {name: max(1, round(estimated * f / target)) for name, f in fractions.items()}
    return ShardPlan(tasks, shards, int(estimated), bytes_per_input_byte, max(1, limit))
