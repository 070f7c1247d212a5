"""Spill files and shards around the page cache (transforms/write/direct.py): the bytes written
are the bytes read, whatever the sizes and alignment; file systems that refuse O_DIRECT get the
page cache; the disk's errors reach the caller; `read_ahead` runs one load ahead, in order; a
job's shards are the same bytes written either way."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from transforms.write import direct
from transforms.write.grouped.spill import SpillReader, SpillWriter

REPO = Path(__file__).resolve().parent.parent


def _parts(seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = [1, 4095, 4096, 4097, 0, 20_000, 3, 70_000, 8191, 1, 65_536, 12_345]
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


@pytest.fixture
def small_stages(monkeypatch):
    """Stages of 3 pages: the parts above cross many stage boundaries."""
    monkeypatch.setattr(direct, "STAGE_BYTES", 3 * direct.ALIGN)


@pytest.fixture
def spill_direct(monkeypatch):
    """Spill files around the page cache (`SPILL_IO=direct`; through it by default)."""
    monkeypatch.setenv("SPILL_IO", "direct")


def _opened_direct(monkeypatch) -> list[bool]:
    """Whether each os.open asked for O_DIRECT, in order."""
    seen: list[bool] = []
    real = os.open

    def spy(path, flags, *args, **kwargs):
        seen.append(bool(flags & getattr(os, "O_DIRECT", 0)))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(direct.os, "open", spy)
    return seen


@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_written_bytes_are_read_back_at_any_offset(tmp_path, monkeypatch, small_stages, mode):
    monkeypatch.setenv("SPILL_IO", mode)
    opened = _opened_direct(monkeypatch)
    parts = _parts(1)
    whole = b"".join(parts)
    writer = direct.DirectWriter(str(tmp_path / "s"))
    for part in parts:
        writer.write(memoryview(part))
        assert writer.tell() <= len(whole)
    assert writer.tell() == len(whole)
    writer.close()
    writer.close()  # a second close does nothing
    assert (tmp_path / "s").read_bytes() == whole  # the padding is cut off
    if mode == "buffered":
        assert opened == [False]
    elif hasattr(os, "O_DIRECT"):
        assert opened[0] is True

    reader = direct.DirectReader()
    rng = np.random.default_rng(2)
    for _ in range(200):
        start = int(rng.integers(0, len(whole)))
        stop = int(rng.integers(start, min(len(whole), start + 40_000) + 1))
        out = bytearray(stop - start)
        assert reader.read_into(str(tmp_path / "s"), start, memoryview(out)) == stop - start
        assert bytes(out) == whole[start:stop]
    # past the end: what there is
    out = bytearray(100)
    assert reader.read_into(str(tmp_path / "s"), len(whole) - 10, memoryview(out)) == 10
    assert bytes(out[:10]) == whole[-10:]
    reader.close()


def test_a_range_larger_than_the_buffer_is_read_whole(tmp_path, small_stages, spill_direct):
    data = np.random.default_rng(3).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    writer = direct.DirectWriter(str(tmp_path / "s"))
    writer.write(data)
    writer.close()
    reader = direct.DirectReader()
    out = bytearray(150_001)
    assert reader.read_into(str(tmp_path / "s"), 7, memoryview(out)) == len(out)
    assert bytes(out) == data[7 : 7 + len(out)]
    reader.close()


def test_a_file_system_that_refuses_o_direct_at_open_gets_the_page_cache(
    tmp_path, monkeypatch, small_stages, spill_direct
):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this system")
    real = os.open
    refused: list[str] = []

    def refuse(path, flags, *args):
        if flags & os.O_DIRECT:
            refused.append(path)
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real(path, flags, *args)

    monkeypatch.setattr(direct.os, "open", refuse)
    parts = _parts(4)
    writer = direct.DirectWriter(str(tmp_path / "s"))
    for part in parts:
        writer.write(part)
    writer.close()
    assert (tmp_path / "s").read_bytes() == b"".join(parts)
    reader = direct.DirectReader()
    out = bytearray(5000)
    assert reader.read_into(str(tmp_path / "s"), 4000, memoryview(out)) == 5000
    assert bytes(out) == b"".join(parts)[4000:9000]
    reader.close()
    assert len(refused) == 2  # the writer's open and the reader's


@pytest.mark.parametrize("sizes", [None, [10], [5000, 3]])
def test_a_file_system_that_refuses_o_direct_at_the_first_write_gets_the_page_cache(
    tmp_path, monkeypatch, small_stages, sizes, spill_direct
):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this system")
    real = os.pwrite
    calls: list[int] = []

    def refuse_once(fd, data, offset):
        calls.append(offset)
        if len(calls) == 1:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", refuse_once)
    parts = _parts(5) if sizes is None else [b"x" * n for n in sizes]
    writer = direct.DirectWriter(str(tmp_path / "s"))
    for part in parts:
        writer.write(part)
    writer.close()
    assert (tmp_path / "s").read_bytes() == b"".join(parts)


@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_a_write_error_on_the_thread_reaches_the_caller(tmp_path, monkeypatch, small_stages, mode):
    monkeypatch.setenv("SPILL_IO", mode)

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(direct.os, "pwrite", full)
    writer = direct.DirectWriter(str(tmp_path / "s"))
    with pytest.raises(OSError) as caught:
        for part in _parts(6):
            writer.write(part)
        writer.close()
    assert caught.value.errno == errno.ENOSPC
    writer.close()  # lets go of what is left; writes and raises nothing more


@pytest.mark.parametrize("mode", [None, "direct", "buffered", "other"])
def test_spill_files_go_through_the_page_cache_unless_asked_not_to(tmp_path, monkeypatch, mode):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this system")
    if mode is None:
        monkeypatch.delenv("SPILL_IO", raising=False)
    else:
        monkeypatch.setenv("SPILL_IO", mode)
    monkeypatch.delenv("OUTPUT_IO", raising=False)
    assert direct.direct_wanted("OUTPUT_IO")  # shards go around it by default
    opened = _opened_direct(monkeypatch)
    spill = SpillWriter(str(tmp_path / "temp"), "train")  # the folder is made as Beam's is
    path, at = spill.write([b"abc", memoryview(b"defgh")])
    spill.close()
    reader = SpillReader()
    assert (at, reader.read(path, 2, 6)) == (0, b"cdef")
    with pytest.raises(OSError, match="spill file ends at byte 8, expected 9"):
        reader.read(path, 0, 9)
    with pytest.raises(FileNotFoundError, match="a spill file of the grouped write is missing"):
        reader.read(path + "-gone", 0, 1)
    reader.close()
    # O_DIRECT asked for by the writer and the reader with SPILL_IO=direct only (a file
    # system that refuses it: see above); an unknown value is the default
    assert len(opened) == 3 and set(opened) == {mode == "direct"}  # and the missing file's


def test_read_ahead_runs_one_load_ahead_in_order():
    events: list[str] = []
    lock = threading.Lock()

    def load(i: int):
        def run() -> int:
            with lock:
                events.append(f"start {i}")
            time.sleep(0.02)
            return i * i

        return run

    got = []
    for value in direct.read_ahead(load(i) for i in range(5)):
        with lock:
            events.append(f"use {value}")
        got.append(value)
        time.sleep(0.03)
    assert got == [0, 1, 4, 9, 16]
    # load i + 1 starts before result i is used: the loads overlap the caller's work
    for i in range(4):
        assert events.index(f"start {i + 1}") < events.index(f"use {i * i}")
    assert list(direct.read_ahead([])) == []


def test_read_ahead_raises_what_a_load_raised_and_waits_when_left_early():
    def bad() -> int:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        list(direct.read_ahead([lambda: 1, bad, lambda: 3]))

    finished = threading.Event()

    def slow() -> int:
        time.sleep(0.1)
        finished.set()
        return 2

    loads = direct.read_ahead([lambda: 1, slow, lambda: 3])
    assert next(loads) == 1
    loads.close()  # the load under way (slow) is waited for, not left running
    assert finished.is_set()


@pytest.mark.parametrize("mode", ["buffered", "direct"])
def test_a_full_disk_fails_a_shuffled_job_with_one_line(tmp_path, mode):
    """A shuffled job whose spill files fill the disk (a 4 MiB tmpfs), through the page cache
    or around it: exit 1, a one-line error that says so, no manifest."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    import pyarrow as pa
    import pyarrow.parquet as pq

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        n = 60_000
        rng = np.random.default_rng(7)
        table = pa.table({"id": np.arange(n), "text": [f"row {i} " * 8 for i in range(n)],
                          "x": rng.random(n)})  # fmt: skip
        pq.write_table(table, tmp_path / "t.parquet", row_group_size=10_000)
        out = disk / "out"
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", "convert", "--input", str(tmp_path / "t.parquet"),
             "--output", str(out), "--shuffle", "--compression", "none", "--workers", "2"],
            cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
            env=dict(os.environ, SPILL_IO=mode),
        )  # fmt: skip
        assert done.returncode == 1, done.stderr[-3000:]
        errors = [x for x in done.stderr.splitlines() if "error:" in x]
        assert len(errors) == 1, done.stderr[-3000:]
        assert "No space left on device" in errors[0]
        assert not (out / "manifest.json").exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_stage_buffers_are_reused_and_private_to_a_process(tmp_path):
    """A closed writer's buffers serve the next writer (no fresh pages per spill file), and a
    buffer is the process's own: a forked worker writing into one it inherited leaves its
    parent's as it was."""
    writer = direct.DirectWriter(str(tmp_path / "a"))
    stages = list(writer._stages)
    writer.write(b"x" * 10)
    writer.close()
    again = direct.DirectWriter(str(tmp_path / "b"))
    assert any(s is t for s in again._stages for t in stages)
    again.close()
    buffer = direct._take(direct.STAGE_BYTES)
    buffer[:4] = b"pare"
    pid = os.fork()
    if pid == 0:  # the worker
        buffer[:4] = b"kid!"
        os._exit(0)
    os.waitpid(pid, 0)
    assert buffer[:4] == b"pare"
    direct._give(buffer)


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_shards_around_the_page_cache_are_the_bytes_of_shards_through_it(
    tmp_path, monkeypatch, compression
):
    """A job's shards (and their index, read back from them) written with O_DIRECT: the same
    files as through the page cache; OUTPUT_IO=buffered asks for that."""
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this system")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import run_cli_captured

    n = 30_000
    rng = np.random.default_rng(3)
    table = pa.table({"id": np.arange(n), "text": [f"r{i}" * (i % 7) for i in range(n)],
                      "x": rng.random(n), "v": [[i] * (i % 4) for i in range(n)]})  # fmt: skip
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=7_000)
    files = {}
    for mode in ("direct", "buffered"):
        monkeypatch.setenv("OUTPUT_IO", mode)
        opened = _opened_direct(monkeypatch)
        out = tmp_path / mode
        result = run_cli_captured(["convert", "--input", tmp_path / "t.parquet", "--output", out,
                                   "--compression", compression, "--index", "--workers", "1",
                                   "--shard-mb", "0.2", "--batch-rows", "3000"])  # fmt: skip
        assert result.code == 0, result.err
        assert any(opened) is (mode == "direct")
        files[mode] = {p.name: p.read_bytes() for p in out.glob("train-*")}
        assert run_cli_captured(["verify", out]).code == 0
    assert len(files["direct"]) > 3 and files["direct"] == files["buffered"]
