"""The blocks sink's steps under retries, without a runner (docs/dask.md, "Which sink steps are
idempotent, and why"): a rerun write leaves another temp file, never the same one; finalize
renames only the parts it is given (the committed attempts'), deletes the other temp files,
and run again after it finished, or after a partial rename, gives the same shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from transforms.write.compression import file_suffix
from transforms.write.files import BlockFile, ShardPart, temp_path
from transforms.write.finalize import finalize_shards

SUFFIX = file_suffix("none")


def _frame(payloads: list[bytes]) -> np.ndarray:
    """Records framed as the writer takes them (the crcs are not read here)."""
    out = b"".join(len(p).to_bytes(8, "little") + b"\0" * 4 + p + b"\0" * 4 for p in payloads)
    return np.frombuffer(out, dtype=np.uint8)


def _write(temp_dir: Path, order: tuple[int, int], payloads: list[bytes]) -> ShardPart:
    path = temp_path(str(temp_dir), "train", order, "none")
    out = BlockFile(path, "none", None, order, "train")
    out.write(_frame(payloads), len(payloads))
    return out.close()


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, list[ShardPart], ShardPart]:
    """Two committed parts and a failed attempt of the first (same order key, own file)."""
    temp_dir = tmp_path / "beam-temp-shards-x"
    temp_dir.mkdir()
    failed = _write(temp_dir, (0, 0), [b"a"])  # the attempt that did not commit
    parts = [_write(temp_dir, (0, 0), [b"a", b"b"]), _write(temp_dir, (1, 0), [b"c"])]
    return temp_dir, parts, failed


def test_attempts_never_share_a_temp_file(written):
    _, parts, failed = written
    assert failed.temp_path != parts[0].temp_path
    assert failed.order == parts[0].order


def test_finalize_renames_committed_parts_and_deletes_the_rest(written, tmp_path):
    temp_dir, parts, _ = written
    prefix = str(tmp_path / "train")
    shards = finalize_shards(None, parts, "train", prefix, "none", 0, str(temp_dir))
    assert [(Path(s.path).name, s.rows) for s in shards] == [
        (f"train-00000-of-00002{SUFFIX}", 2),
        (f"train-00001-of-00002{SUFFIX}", 1),
    ]
    assert list(temp_dir.iterdir()) == []  # the failed attempt's file is gone
    assert Path(shards[0].path).read_bytes() == _frame([b"a", b"b"]).tobytes()


def test_finalize_run_again_gives_the_same_shards(written, tmp_path):
    temp_dir, parts, _ = written
    prefix = str(tmp_path / "train")
    first = finalize_shards(None, parts, "train", prefix, "none", 0, str(temp_dir))
    again = finalize_shards(None, parts, "train", prefix, "none", 0, str(temp_dir))
    assert again == first
    files = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert files == [f"train-00000-of-00002{SUFFIX}", f"train-00001-of-00002{SUFFIX}"]


def test_finalize_after_a_partial_rename(written, tmp_path):
    """A finalize that stopped after renaming the first part: the rerun takes it as renamed."""
    temp_dir, parts, _ = written
    prefix = str(tmp_path / "train")
    Path(parts[0].temp_path).rename(f"{prefix}-00000-of-00002{SUFFIX}")
    shards = finalize_shards(None, parts, "train", prefix, "none", 0, str(temp_dir))
    assert [s.rows for s in shards] == [2, 1]
    assert Path(shards[1].path).read_bytes() == _frame([b"c"]).tobytes()


def test_finalize_with_a_part_lost_fails(written, tmp_path):
    """A committed part neither in temp nor in place is an error, not a shard dropped."""
    temp_dir, parts, _ = written
    Path(parts[1].temp_path).unlink()
    with pytest.raises(FileNotFoundError, match="a written shard part is missing"):
        finalize_shards(None, parts, "train", str(tmp_path / "train"), "none", 0, str(temp_dir))
