"""A large CSV file cut into byte ranges (transforms/read/delimited/ranges.py): the cuts are row
starts as pyarrow's parser sees them, each range read as the header line and its own bytes
gives its rows and no other, and the rows before each cut are counted as pyarrow counts them."""

from __future__ import annotations

import io
import itertools
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from transforms.read.delimited import scan
from transforms.read.delimited.ranges import TextRange, csv_ranges, json_line_ranges, open_range
from transforms.read.delimited.scan import scan_rows

ENDINGS = ("\n", "\r\n", "\r")


def _field(rng: random.Random, escape: str | None) -> str:
    kind = rng.randrange(10)
    word = "".join(rng.choice("abc xyz019") for _ in range(rng.randrange(6)))
    if kind == 0:
        return ""
    if kind == 1:  # a quote inside an unquoted field: a plain character
        return "q" + word + '"' + word
    if kind == 2:  # quoted, holding the delimiter, doubled quotes and line breaks
        inner = word + rng.choice([",", '""', "\n", "\r\n", "\r", ", \n", '""\n', ""]) + word
        return '"' + inner + '"'
    if kind == 3:  # quoted, then more characters after the closing quote
        return '"' + word + '"' + word
    if kind == 4 and escape:  # an escaped delimiter, quote or line break
        return word + escape + rng.choice([",", '"', "\n", escape]) + word
    if kind == 5:
        return '""'
    return word


def _csv(rng: random.Random, rows: int, escape: str | None = None) -> bytes:
    out = ["\ufeff"] if rng.random() < 0.2 else []
    out.append("a,b,c" + rng.choice(ENDINGS))
    for i in range(rows):
        while rng.random() < 0.05:  # empty lines: no rows
            out.append(rng.choice(ENDINGS))
        line = ",".join(_field(rng, escape) for _ in range(3))
        last = i == rows - 1 and rng.random() < 0.5
        out.append(line if last else line + rng.choice(ENDINGS))
    return "".join(out).encode("utf-8")


def _read(data: bytes, escape: str | None) -> pa.Table:
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(block_size=1 << 12),
        parse_options=pacsv.ParseOptions(escape_char=escape or False, newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types={"a": pa.string(), "b": pa.string(), "c": pa.string()}
        ),
    )


@pytest.mark.parametrize("escape", [None, "\\"])
def test_every_cut_is_a_row_start_and_the_rows_before_it_are_counted(escape):
    for seed in range(60):
        rng = random.Random(seed)
        data = _csv(rng, rng.randrange(1, 80), escape)
        whole = _read(data, escape)
        array = np.frombuffer(data, np.uint8)
        targets = np.sort(np.array([rng.randrange(len(data) + 1) for _ in range(12)]))
        cuts, rows_at, first_end, rows = scan_rows(array, ",", '"', escape, targets, 1 << 30, 1)
        assert rows == whole.num_rows + 1, seed  # the header is a row
        for chunk in (1, 5, 23, 97):  # in pieces, on threads: what one pass gives
            got = scan_rows(array, ",", '"', escape, targets, chunk, 2)
            assert got[0].tolist() == cuts.tolist() and got[1].tolist() == rows_at.tolist(), seed
            assert got[2:] == (first_end, rows), seed
        header = data[:first_end]
        assert _read(header, escape).num_rows == 0
        starts = sorted({first_end, *[c for c in cuts.tolist() if first_end <= c < len(data)]})
        pieces = []
        for a, b in zip(starts, [*starts[1:], len(data)], strict=True):
            piece = _read(header + data[a:b], escape)
            k = int(np.searchsorted(cuts, a))
            if a != first_end:
                assert cuts[k] == a
                assert rows_at[k] - 1 == sum(p.num_rows for p in pieces), seed
            pieces.append(piece)
        assert pa.concat_tables(pieces).equals(whole), seed


def test_a_cut_falls_at_the_first_row_start_at_or_after_its_target():
    data = b'a,b\n1,"x\ny"\n\n2,3\r\n4,5\r6,7'
    array = np.frombuffer(data, np.uint8)
    cuts, rows_at, first_end, rows = scan_rows(array, ",", '"', None, np.arange(len(data) + 1))
    assert first_end == 4 and rows == 5
    # the line starts: 0 (header), 4, 12 (an empty line), 13, 18, 22; the end, 25
    starts = (0, 4, 12, 13, 18, 22)
    for target in range(len(data) + 1):
        start = min((s for s in starts if s >= target), default=len(data))
        assert cuts[target] == start, target
    assert rows_at[list(starts)].tolist() == [0, 1, 2, 2, 3, 4]


def test_a_file_is_cut_into_ranges_that_read_back_as_the_whole(tmp_path):
    rng = random.Random(7)
    data = _csv(rng, 3000)
    path = tmp_path / "big.csv"
    path.write_bytes(data)
    size = len(data) // 7
    ranges = csv_ranges(str(path), ",", '"', None, True, size)
    assert ranges is not None and len(ranges) >= 6
    assert ranges[0].start == 0 and ranges[-1].stop == len(data)
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    whole = _read(data, None)
    tables = []
    for part in ranges:
        with open_range(str(path), part) as f:
            table = _read(f.read(), None)
        assert table.num_rows == part.rows
        assert part.first_row == sum(t.num_rows for t in tables)
        tables.append(table)
    assert pa.concat_tables(tables).equals(whole)


def test_small_or_unsplittable_files_are_left_whole(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"a,b\n" + b"1,2\n" * 100)
    assert csv_ranges(str(path), ",", '"', None, True, 0) is None  # range_bytes 0: never
    assert csv_ranges(str(path), ",", '"', None, True, 400) is None  # under 1.5 ranges
    assert csv_ranges(str(path), ",", '"', None, True, 100) is not None
    path.write_bytes(b"\na,b\n" + b"1,2\n" * 100)  # an empty first line: left whole
    assert csv_ranges(str(path), ",", '"', None, True, 100) is None
    # one quoted value over the whole file: nothing to cut at
    path.write_bytes(b'a,b\n1,"' + b"x\n" * 200 + b'"\n')
    assert csv_ranges(str(path), ",", '"', None, True, 100) is None


def test_without_a_header_every_row_is_data(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"".join(b"%d,%d\n" % (i, i * i) for i in range(500)))
    ranges = csv_ranges(str(path), ",", '"', None, False, 1000)
    assert ranges is not None
    assert [r.header_end for r in ranges] == [0] * len(ranges)
    assert sum(r.rows for r in ranges) == 500
    with open_range(str(path), ranges[2]) as f:
        first = f.read().split(b"\n", 1)[0]
    assert first == b"%d,%d" % (ranges[2].first_row, ranges[2].first_row ** 2)


def test_a_range_reads_the_header_then_its_bytes(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"x,y\n1,2\n3,4\n5,6\n")
    with open_range(str(path), TextRange(8, 12, 1, 1, 4)) as f:
        assert f.read() == b"x,y\n3,4\n"
    with open_range(str(path), TextRange(0, 8, 0, 1, 0)) as f:
        assert f.read() == b"x,y\n1,2\n"


# ------------------------------------------------------------------------------- JSON Lines


def _jsonl(rng: random.Random, rows: int) -> bytes:
    out = []
    for i in range(rows):
        while rng.random() < 0.08:  # blank lines: no rows, but lines
            out.append(rng.choice(["", " ", "\t ", "\r"]) + "\n")
        text = "".join(rng.choice('ab "\\\n,{}') for _ in range(rng.randrange(8)))
        line = json.dumps({"i": i, "s": text})  # a line break in a value is escaped
        end = "" if i == rows - 1 and rng.random() < 0.5 else rng.choice(["\n", "\r\n"])
        out.append(line + end)
    return "".join(out).encode()


def test_json_lines_ranges_start_at_lines_and_know_their_rows_and_lines(tmp_path, monkeypatch):
    for seed in range(30):
        rng = random.Random(seed)
        data = _jsonl(rng, rng.randrange(2, 300))
        path = tmp_path / f"{seed}.jsonl"
        path.write_bytes(data)
        monkeypatch.setattr(scan, "CHUNK_BYTES", rng.choice([1, 50, 1 << 20]))
        size = rng.randrange(1, max(2, len(data) // 3))
        parts = json_line_ranges(str(path), size)
        lines = data.split(b"\n")
        rows = [ln for ln in lines if ln.strip(b" \t\r")]
        if parts is None:
            assert len(data) <= size * 3 // 2 or len(rows) <= 1, seed
            continue
        assert parts[0].start == 0 and parts[-1].stop == len(data), seed
        assert sum(p.rows for p in parts) == len(rows), seed
        for p in parts:
            assert p.start == 0 or data[p.start - 1] == 10, seed  # a line start
            with open_range(str(path), p) as f:
                got = [ln for ln in f.read().split(b"\n") if ln.strip(b" \t\r")]
            assert got == rows[p.first_row : p.first_row + p.rows], seed
            line = data[: p.start].count(b"\n") + 1
            assert p.first_line == line, seed
