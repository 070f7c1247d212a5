"""The files one read task writes for one split (transforms/write/rolling/task_files.py): rolled
at the limit, a last file under half of it folded into the one before from memory (it never
reaches the disk), the same bytes whether written batch by batch or assembled from blocks
spilled ahead (write_block), and whatever each file holds in memory before it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf
from test_sharding import _framed

from transforms.write.files import BlockFile
from transforms.write.rolling.task_files import TaskFiles


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
def test_task_files_roll_at_the_limit_and_fold_the_last(tmp_path, compression):
    from transforms.write.compression import gzip_compressor

    compress = gzip_compressor(None, "isal") if compression == "gzip" else None
    seq = iter(range(100))

    def new_file(i: int) -> BlockFile:
        path = str(tmp_path / f"part-{next(seq)}")
        return BlockFile(path, compression, compress, (0, i), "train")

    limit = 20_000
    files = TaskFiles(new_file, limit)
    parts = []
    for k in range(9):  # batches of about 11 KB framed: cut where a file fills
        parts += files.write(_framed(300, seed=k, first=300 * k))
    parts += files.close()
    sizes = [p.bytes for p in sorted(parts, key=lambda p: p.order)]
    # each file from the limit to 1.5 x it (a last one under half the limit folded into it);
    # the last from half the limit
    assert all(limit <= s < 1.55 * limit for s in sizes[:-1]), sizes
    assert limit // 2 <= sizes[-1] < 1.55 * limit, sizes
    assert sum(p.rows for p in parts) == 2700
    got = []
    for p in sorted(parts, key=lambda p: p.order):
        data = open(p.temp_path, "rb").read()
        assert len(data) == p.bytes
        records = tf.data.TFRecordDataset(p.temp_path, compression_type={
            "gzip": "GZIP", "zlib": "ZLIB", "none": ""}[compression])  # fmt: skip
        got += [
            tf.train.Example.FromString(r.numpy()).features.feature["id"].int64_list.value[0]
            for r in records
        ]
    assert got == list(range(2700))  # every record once, in order, across the rolled files
    assert len(list(tmp_path.iterdir())) == len(parts)  # the folded file was removed


def _task_files(root: Path, compression: str, batches: list, blocks: bool) -> list[bytes]:
    """The bytes of each file a task writes of `batches` (limit 20,000 bytes, 6,000
    compressed), written batch by batch or, with `blocks`, spilled as blocks first and
    assembled from them (write_block)."""
    from transforms.write.compression import gzip_compressor
    from transforms.write.rolling.blocks import BlockReader, BlockSpill

    compress = gzip_compressor(None, "isal") if compression == "gzip" else None
    root.mkdir()

    def new_file(i: int) -> BlockFile:
        return BlockFile(str(root / f"part-{i}"), compression, compress, (0, i), "train")

    files, parts = TaskFiles(new_file, 20_000 if compression == "none" else 6_000), []
    if blocks:
        spill = BlockSpill(str(root), "train", compression, compress)
        refs = [spill.add(batch) for batch in batches]
        spill.close()
        reader = BlockReader()
        for ref in refs:
            parts += files.write_block(ref, reader)
        reader.close()
    else:
        for batch in batches:
            parts += files.write(batch)
    parts += files.close()
    assert sum(p.rows for p in parts) == sum(b.num_records for b in batches)
    return [Path(p.temp_path).read_bytes() for p in sorted(parts, key=lambda p: p.order)]


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
@pytest.mark.parametrize("blocks", [False, True], ids=["batches", "blocks"])
def test_the_last_file_is_folded_from_memory_with_the_same_bytes(
    tmp_path, monkeypatch, compression, blocks
):
    """A task's files keep their first bytes in memory (TaskFiles.HOLD_BYTES): the last file,
    folded into the one before, never reaches the disk, and every file has the bytes it has
    when each file is written from its first byte (HOLD_BYTES 0)."""
    import transforms.write.files as files_module
    import transforms.write.rolling.task_files as task_files

    created: list[str] = []
    create = files_module._create
    monkeypatch.setattr(files_module, "_create", lambda path: created.append(path) or create(path))
    batches = [_framed(300, seed=k, first=300 * k) for k in range(9)]
    held = _task_files(tmp_path / "held", compression, batches, blocks)
    made = sorted(Path(p).name for p in created)
    assert len(held) >= 2 and made == [f"part-{i}" for i in range(len(held))]  # no last one
    monkeypatch.setattr(task_files, "HOLD_BYTES", 0)
    created.clear()
    written = _task_files(tmp_path / "written", compression, batches, blocks)
    assert written == held
    assert len(created) == len(held) + 1  # the last file written, read back and deleted


def test_a_last_file_of_half_the_limit_or_more_is_its_own(tmp_path):
    batches = [_framed(300, seed=k, first=300 * k) for k in range(7)]  # 4 files and 17 KB
    sizes = [len(b) for b in _task_files(tmp_path / "files", "none", batches, blocks=False)]
    assert len(sizes) == 5 and all(20_000 <= s < 21_000 for s in sizes[:4])
    assert 10_000 <= sizes[-1] < 20_000, sizes
    again = _task_files(tmp_path / "blocks", "none", batches, blocks=True)
    assert [len(b) for b in again] == sizes
