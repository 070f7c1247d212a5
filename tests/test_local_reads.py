"""Local files kept as bytes read by the compiled loop (transforms/files/local_reads.py): the
same parts, contents and bad rows as the Python way, whatever the files are; the parts bounded
by their budget; the C calls it makes."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from numba import njit

from transforms.batch import TableBatch
from transforms.encode.kernel.memory import c_function
from transforms.files import local_reads, stage
from transforms.files.options import parse_files
from transforms.files.plan import plan_files

pytestmark = pytest.mark.skipif(
    local_reads.libc_functions() is None, reason="no statx here: the stage reads in Python"
)


def _plan(raw, schema):
    return plan_files(parse_files(raw, "c.yaml"), schema)


def _files(tmp_path, count: int) -> list[bytes]:
    out = []
    for i in range(count):
        data = bytes(np.random.default_rng(i).integers(0, 256, 50 + 37 * i, dtype=np.uint8))
        (tmp_path / f"{i}.bin").write_bytes(data)
        out.append(data)
    return out


def _both_ways(monkeypatch, plan, batch):
    """The stage's parts (table, source rows, bad rows) read the Python way and compiled."""
    got = {}
    for way in ("python", "compiled"):
        monkeypatch.setenv("FILE_READS", way)
        got[way] = [
            (None if p is None else p.table, None if p is None else stage.source_rows(p), b)
            for p, b in stage.read_files(plan, batch)
        ]
    return got["python"], got["compiled"]


def _joined(parts):
    """The parts' rows as one table, their source rows, and their bad rows (parts may be cut
    at other rows by the two ways: the Python way cuts after the row that reaches the budget,
    the compiled loop before the row that would pass it)."""
    tables = [t for t, _, _ in parts if t is not None]
    rows = np.concatenate([r for _, r, _ in parts if r is not None]).tolist()
    return pa.concat_tables(tables).combine_chunks(), rows, [r for _, _, b in parts for r in b]


def test_every_kind_of_file_reads_as_the_python_way_reads_it(tmp_path, monkeypatch):
    files = _files(tmp_path, 30)
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "big.bin").write_bytes(b"x" * 5000)  # past max_file_bytes
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # never opened for writing: a blocking read would hang
    refs = [f"{i}.bin" for i in range(30)]
    odd = {
        3: "gone.bin",
        5: None,
        8: "",
        11: "empty.bin",
        13: "big.bin",
        17: "dir",
        19: "fifo",
        22: "a\x00b.bin",  # a NUL byte
        24: "x" * 5000,  # longer than a path can be
        26: str(tmp_path / "4.bin"),  # absolute
        28: "dir/../6.bin",
    }
    for i, ref in odd.items():
        refs[i] = ref
    table = pa.table({"u": refs, "k": list(range(30))})
    plan = _plan({"u": {"max_file_bytes": 4000}}, table.schema)
    batch = TableBatch(table, str(tmp_path / "t.csv"), 10, rows=None)
    monkeypatch.setattr(stage, "CHUNK_BYTES", 3000)  # parts of a few files
    python, compiled = _both_ways(monkeypatch, plan, batch)
    assert len(compiled) >= 4
    for table, _, _ in compiled:  # no part past its budget: each is one or more whole files
        assert table is None or (pc.sum(pc.binary_length(table["u"])).as_py() or 0) <= 3000
    assert _joined(compiled) == _joined(python)
    bad = {row["row"] - 10: row["reason"].split(": ")[-1] for _, _, b in compiled for row in b}
    assert bad == {
        3: "file not found",
        8: "an empty path",
        13: "a file of 5,000 bytes, larger than max_file_bytes 4,000",
        17: "a directory",
        19: "not a regular file",
        22: "a path with a NUL byte",
        24: "cannot open the file (File name too long)",
    }
    values = dict(
        zip(
            np.concatenate([r for _, r, _ in compiled if r is not None]).tolist(),
            pa.concat_tables([t for t, _, _ in compiled if t is not None])["u"].to_pylist(),
            strict=True,
        )
    )
    for i in range(30):
        if i in bad:
            assert i + 10 not in values
        else:
            want = {5: None, 11: b"", 26: files[4], 28: files[6]}.get(i, files[i])
            assert values[i + 10] == want


def test_two_columns_and_a_file_larger_than_a_part(tmp_path, monkeypatch):
    files = _files(tmp_path, 12)
    (tmp_path / "huge.bin").write_bytes(bytes(range(256)) * 40)  # 10,240 bytes
    a = [f"{i}.bin" for i in range(12)]
    b = [f"{11 - i}.bin" for i in range(12)]
    a[4], b[6], b[9], a[9] = "huge.bin", "gone.bin", None, "huge.bin"
    table = pa.table({"a": a, "b": b})
    plan = _plan({"a": {}, "b": {"output": "b_bytes"}}, table.schema)
    batch = TableBatch(table, str(tmp_path / "t.csv"), 0, rows=None)
    monkeypatch.setattr(stage, "CHUNK_BYTES", 1000)
    python, compiled = _both_ways(monkeypatch, plan, batch)
    assert _joined(compiled) == _joined(python)
    got = pa.concat_tables([t for t, _, _ in compiled if t is not None])
    rows = np.concatenate([r for _, r, _ in compiled if r is not None]).tolist()
    assert rows == [i for i in range(12) if i != 6]
    assert got.column_names == ["a", "b", "b_bytes"]
    huge = (tmp_path / "huge.bin").read_bytes()
    for i, x, y in zip(rows, got["a"].to_pylist(), got["b_bytes"].to_pylist(), strict=True):
        assert x == (huge if i in (4, 9) else files[i])
        assert y == (None if i == 9 else files[11 - i])
    (row,) = [r for _, _, bad in compiled for r in bad]
    assert (row["row"], row["column"]) == (6, "b")


def test_a_file_whose_size_says_nothing_is_left_to_the_python_way(tmp_path, monkeypatch):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc")
    table = pa.table({"u": ["/proc/self/status"]})
    monkeypatch.setenv("FILE_READS", "compiled")
    plan = _plan({"u": {}}, table.schema)
    ((part, bad),) = list(stage.read_files(plan, TableBatch(table, "", 0)))
    (data,) = part.table["u"].to_pylist()
    assert not bad and data.startswith(b"Name:") and data.endswith(b"\n")


def test_a_part_ends_before_the_row_that_would_pass_its_budget(tmp_path):
    files = _files(tmp_path, 10)  # 50, 87, 124, ... bytes
    paths = pa.array([str(tmp_path / f"{i}.bin") for i in range(10)])
    rows = local_reads.LocalRows([paths], [1 << 20])
    end, (buffer,) = rows.read(0, 50 + 87 + 124)
    assert end == 3 and not rows.fallback[:3].any()
    assert rows.sizes[0, :3].tolist() == [50, 87, 124]
    assert bytes(buffer[:261]) == b"".join(files[:3])
    end, (buffer,) = rows.read(3, 10)  # a first row past the budget is left alone, not cut
    assert end == 4 and rows.fallback[3]
    end, (buffer,) = rows.read(4, 1 << 20)
    assert end == 10 and bytes(buffer[: rows.sizes[0, 4:10].sum()]) == b"".join(files[4:])


def test_the_c_calls_return_what_the_c_library_says(tmp_path):
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.labs, ctypes.c_void_p).value
    labs = c_function(64, 64)  # long labs(long)

    @njit
    def call(fn, x):
        return labs(fn, (x,))

    assert call(address, -7) == 7
    assert call(address, -(2**40)) == 2**40


def test_where_the_kernel_cannot_read_a_file_the_stage_reads_in_python(tmp_path, monkeypatch):
    assert local_reads.wanted()
    monkeypatch.setenv("FILE_READS", "python")
    assert not local_reads.wanted()
    monkeypatch.delenv("FILE_READS")
    refused = np.array(local_reads.libc_functions())
    # statx as a sandbox that refuses it: abs(fd), never 0 (success)
    refused[1] = ctypes.cast(ctypes.CDLL(None).abs, ctypes.c_void_p).value
    monkeypatch.setattr(local_reads, "libc_functions", lambda: refused)
    local_reads._reads_a_file.cache_clear()
    try:
        assert not local_reads.wanted()  # the probe of the module's own file found it unread

        def unused(*args):
            raise AssertionError("the compiled loop ran")

        monkeypatch.setattr(local_reads, "LocalRows", unused)
        (tmp_path / "a.bin").write_bytes(b"abc")
        table = pa.table({"u": ["a.bin"]})
        ((part, bad),) = list(
            stage.read_files(
                _plan({"u": {}}, table.schema), TableBatch(table, str(tmp_path / "t"), 0)
            )
        )
        assert part.table["u"].to_pylist() == [b"abc"] and not bad
    finally:
        local_reads._reads_a_file.cache_clear()


def test_a_buffer_is_read_into_again_only_once_nothing_holds_it(tmp_path):
    """The parts' buffers are kept and read into again (their pages in place), but never while
    a part's column still holds one: what a held part holds stays as it was read."""
    data = [bytes([i]) * 200 for i in range(12)]
    for i, d in enumerate(data):
        (tmp_path / f"{i}.bin").write_bytes(d)
    paths = pa.array([str(tmp_path / f"{i}.bin") for i in range(12)], pa.large_string())
    rows = local_reads.LocalRows([paths], [1 << 20])
    budget = 4 * 200  # parts of four files
    parts, start = [], 0
    while start < rows.n:
        end, (buffer,) = rows.read(start, budget)
        sizes = rows.sizes[0, start:end].copy()
        parts.append((start, end, stage._from_buffer(buffer, sizes)))  # every part held
        del buffer
        start = end
    assert [(a, b) for a, b, _ in parts] == [(0, 4), (4, 8), (8, 12)]
    for a, _, column in parts:  # none written over by a later part
        assert column.to_pylist() == data[a : a + len(column)]
    addresses = {column.buffers()[2].address for _, _, column in parts}
    assert len(addresses) == 3

    parts.clear()  # nothing holds them now: the next parts go where they went
    taken = set()
    start = 0
    while start < rows.n:
        end, (buffer,) = rows.read(start, budget)
        taken.add(buffer.ctypes.data)
        column = stage._from_buffer(buffer, rows.sizes[0, start:end].copy())
        assert column.to_pylist() == data[start:end]
        del buffer, column
        start = end
    assert taken <= addresses and len(taken) == 1


def test_kept_buffers_are_few_and_of_the_size_asked():
    buffers = local_reads._Buffers()
    a = buffers.take(100)
    b = buffers.take(100)  # `a` is held: another one
    assert a is not b and a.nbytes == b.nbytes == 100
    del a
    c = buffers.take(100)  # the first, idle again
    assert c is buffers._kept[0]
    d = buffers.take(100)  # both held: a new one, not kept (KEEP is 2)
    assert d is not c and d is not b and len(buffers._kept) == 2
    del b, c, d
    e = buffers.take(50)  # another size: a new one, kept in an idle one's place
    assert e.nbytes == 50 and any(k is e for k in buffers._kept) and len(buffers._kept) == 2
