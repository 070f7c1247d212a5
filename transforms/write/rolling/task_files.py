"""The files one read task writes for one split, in the rolling write (the default sink): a
file is closed at the target size and the next one opened; a last, small one is folded into
the one before. Used by the Beam writer (rolling.py) and the in-process engine alike, which
also hands it batches compressed ahead of their file (`write_block`, blocks.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from transforms.encode.records import EncodedBatch
from transforms.write.files import BlockFile, ShardPart
from transforms.write.rolling.blocks import BlockReader, BlockRef, block_batch

__all__ = ["HOLD_BYTES", "TaskFiles"]

# A task's last file is folded into the one before when it holds less than half the limit, and
# every file keeps its first bytes in memory up to this many (or half the limit, if less;
# BlockFile.hold): a folded file that small never reached the disk. Folding a last file of any
# size below the limit, as before, read it back from the disk: a file of about the limit when a
# task makes about two files' worth (the plan's tasks of small jobs do); at 10,000 small JPEGs
# read 100,000 times (650 MB, eight tasks) 0.1 s of reads and 0.08 s of deletions of a 1.6 s
# job, its bytes written twice. More held would stall the writes of every file at the start.
HOLD_BYTES = 16 << 20


class TaskFiles:
    """The files one task writes for one split: a file is full at `limit` bytes (a batch is cut
    at the record where it fills, its bytes guessed from the file's compression so far); at the
    end a last file smaller than half the limit is appended to the one before (from memory when
    it is held, HOLD_BYTES). Every file of the task then holds `limit` to 1.5 x `limit` bytes,
    but the last, which may hold half the limit, or the task has a single file.

    One limit for every task (the target size), not one per task fitted to its estimate: the
    estimate can be off for some files (a Parquet file whose strings are dictionary-encoded
    reads small), and per-task sizes would then differ by that error and the last-file fold.
    """

    def __init__(self, new_file: Callable[[int], BlockFile], limit: int) -> None:
        self._new_file = new_file
        self._limit = limit
        self._fold = limit // 2  # a last file this small is folded into the one before
        self._prev: BlockFile | None = None
        self._cur: BlockFile | None = None
        self._seq = 0
        self._ratio = 1.0  # bytes in the file per framed byte, from the last file

    def _full(self) -> bool:
        return self._cur.bytes >= self._limit

    def _open(self) -> BlockFile:
        """The current file, a new one (held: `HOLD_BYTES`) when there is none."""
        if self._cur is None:
            self._cur = self._new_file(self._seq)
            self._cur.hold(min(self._fold, HOLD_BYTES))
            self._seq += 1
        return self._cur

    def _room(self, offsets: np.ndarray, start: int) -> int:
        """How many records from `start` fit in the current file (at least one)."""
        cur = self._cur
        ratio = cur.bytes / cur.framed if cur.framed and cur.bytes else self._ratio
        # aim 2% past the limit: a guess a little short would leave a tiny block to top up
        room = (self._limit * 1.02 - cur.bytes) / max(ratio, 1e-6)
        fit = int(np.searchsorted(offsets[start:] - offsets[start], room, side="right")) - 1
        return max(1, fit)

    def write_block(self, ref: BlockRef, blocks: BlockReader) -> list[ShardPart]:
        """A batch spilled as one block (blocks.py), written as `write` writes the batch: the
        block copied as it is when the batch goes whole into the current file (the same bytes
        `write` makes of it), else the batch, read back, cut where `write` cuts it."""
        cur = self._open()
        ratio = cur.bytes / cur.framed if cur.framed and cur.bytes else self._ratio
        room = (self._limit * 1.02 - cur.bytes) / max(ratio, 1e-6)  # as in _room
        if not ref.as_stored or (ref.framed_bytes > room and ref.rows > 1):
            return self.write(block_batch(ref, blocks.read(ref)))  # zlib, or a cut: as write()
        cur.write_copied(
            lambda f: blocks.copy(ref, f), ref.size, ref.rows, ref.framed_bytes,
            lambda: blocks.read(ref),
        )  # fmt: skip
        done = []
        if self._full():
            self._ratio = cur.bytes / cur.framed
            if self._prev is not None:
                done.append(self._prev.close())
            self._prev, self._cur = cur, None
        return done

    def write(self, batch: EncodedBatch) -> list[ShardPart]:
        done = []
        offsets, n, start = batch.offsets, batch.num_records, 0
        while start < n:
            self._open()
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
        if prev is not None and cur is not None and cur.bytes < self._fold:
            prev.fold(cur)
            cur = None
        self._prev = self._cur = None
        return [f.close() for f in (prev, cur) if f is not None]
