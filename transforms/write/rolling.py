"""The rolling write (the default): each worker writes the rows of its ReadTask as they come,
per split into files of the target size; no record crosses the network."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.encode.records import EncodedBatch
from transforms.write.files import BlockFile, ShardPart, block_compressor, temp_path
from transforms.write.progress import SinkProgress

__all__ = ["RollingWriteFn"]


class _TaskFiles:
    """The files one task writes for one split: a file is full at `limit` bytes (a batch is cut
    at the record where it fills, its bytes guessed from the file's compression so far); at the
    end a last file smaller than `limit` is appended to the one before. Every file of the task
    then holds `limit` to 2 x `limit` bytes, or the task has a single file.

    One limit for every task (the target size), not one per task fitted to its estimate: the
    estimate can be off for some files (a Parquet file whose strings are dictionary-encoded
    reads small), and per-task sizes would then differ by that error and the last-file fold.
    """

    def __init__(self, new_file: Callable[[int], BlockFile], limit: int) -> None:
        self._new_file = new_file
        self._limit = limit
        self._prev: BlockFile | None = None
        self._cur: BlockFile | None = None
        self._seq = 0
        self._ratio = 1.0  # bytes in the file per framed byte, from the last file

    def _full(self) -> bool:
        return self._cur.bytes >= self._limit

    def _room(self, offsets: np.ndarray, start: int) -> int:
        """How many records from `start` fit in the current file (at least one)."""
        cur = self._cur
        ratio = cur.bytes / cur.framed if cur.framed and cur.bytes else self._ratio
        # aim 2% past the limit: a guess a little short would leave a tiny block to top up
        room = (self._limit * 1.02 - cur.bytes) / max(ratio, 1e-6)
        fit = int(np.searchsorted(offsets[start:] - offsets[start], room, side="right")) - 1
        return max(1, fit)

    def write(self, batch: EncodedBatch) -> list[ShardPart]:
        done = []
        offsets, n, start = batch.offsets, batch.num_records, 0
        while start < n:
            if self._cur is None:
                self._cur = self._new_file(self._seq)
                self._seq += 1
            stop = min(n, start + self._room(offsets, start))
            self._cur.write(batch.buffer[offsets[start] : offsets[stop]], stop - start)
            start = stop
            if self._full():
                if self._cur.framed:
                    self._ratio = self._cur.bytes / self._cur.framed
                if self._prev is not None:
                    done.append(self._prev.close())
                self._prev, self._cur = self._cur, None
        return done

    def close(self) -> list[ShardPart]:
        prev, cur = self._prev, self._cur
        if prev is not None and cur is not None and not self._full():
            prev.append(cur.close())
            cur = None
        self._prev = self._cur = None
        return [f.close() for f in (prev, cur) if f is not None]


@beam.typehints.with_input_types(EncodedBatch)
@beam.typehints.with_output_types(ShardPart)
class RollingWriteFn(beam.DoFn):
    """EncodedBatch of one split -> ShardPart, each task's rows in files of the target size.
    `progress_dir`: where it reports what it has written (write/progress.py); None: nowhere."""

    def __init__(
        self,
        split: str,
        temp_dir: str,
        compression: str,
        level: int | None,
        backend: str,
        target_bytes: int,
        progress_dir: str | None = None,
    ) -> None:
        self._split = split
        self._progress_dir = progress_dir
        self._temp_dir = temp_dir
        self._compression = compression
        self._level, self._backend = level, backend
        self._target = target_bytes

    def setup(self) -> None:
        self._compress = block_compressor(self._compression, self._level, self._backend)
        self._progress = None
        if self._progress_dir is not None:
            self._progress = SinkProgress(self._progress_dir, self._split)

    def start_bundle(self) -> None:
        self._tasks: dict[int, _TaskFiles] = {}

    def _files(self, task: int) -> _TaskFiles:
        def new_file(seq: int) -> BlockFile:
            order = (task, seq)
            path = temp_path(self._temp_dir, self._split, order, self._compression)
            told = None if self._progress is None else self._progress.add
            return BlockFile(path, self._compression, self._compress, order, self._split, told)

        return _TaskFiles(new_file, self._target)

    def process(self, batch: EncodedBatch) -> Iterator[ShardPart]:
        if not batch.framed:
            raise ValueError("the shard writer needs framed records (EncodeExamples(framed=True))")
        for task in [t for t in self._tasks if t != batch.task]:  # a task's rows come together
            yield from self._tasks.pop(task).close()
        if batch.task not in self._tasks:
            self._tasks[batch.task] = self._files(batch.task)
        yield from self._tasks[batch.task].write(batch)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for files in self._tasks.values():
            for part in files.close():
                yield WindowedValue(part, MIN_TIMESTAMP, [GlobalWindow()])
        self._tasks = {}
        if self._progress is not None:
            self._progress.flush()

