"""Bad rows never vanish: each goes to `<output>/_errors/` (JSON lines: file, row, column, reason,
raw values), the good rows are written, and the job fails past --max-bad-rows /
--max-bad-fraction (after the error files are written, with no manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import read_manifest, read_output, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.job.config import ConfigError, load_config
from transforms.batch import TableBatch
from transforms.deadletter import BadRowsError, check_bad_rows, isolate_bad_rows
from transforms.encode.records import encode_table
from transforms.encode.schema import ColumnOptions, ConversionError, plan_features

EXIT_OK, EXIT_FAILED = 0, 1
SHORT = "short"  # a row whose list is shorter than the column's shape [1, 2]


def pairs(values: list) -> pa.Array:
    """A list<list<int64>> column of shape [1, 2]: a value v is [[v, v]], SHORT is [[0]] (a bad
    row: a list of the wrong length), None a null."""
    rows = [None if v is None else [[0]] if v == SHORT else [[v, v]] for v in values]
    return pa.array(rows, pa.list_(pa.list_(pa.int64())))


def error_records(out: Path) -> list[dict]:
    rows = [
        json.loads(line)
        for path in sorted((out / "_errors").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    return sorted(rows, key=lambda r: (r["source"], -1 if r["row"] is None else r["row"]))


def convert(tmp_path: Path, path: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = run_cli(["convert", "--input", str(path), "--output", str(out), *extra])
    return code, out


def convert_shaped(tmp_path: Path, path: Path, *extra: str) -> tuple[int, Path]:
    """The job with column n's shape set to [1, 2] (inferred from a batch, a row of another
    length would make that dim -1: ragged, and no bad row)."""
    config = tmp_path / "shape.yaml"
    config.write_text("columns: {n: {shape: [1, 2]}}\n", encoding="utf-8")
    return convert(tmp_path, path, "--config", str(config), *extra)


# ----------------------------------------------------------------------------- plain functions


def _encoder(specs):
    def encode(batch: TableBatch):
        return encode_table(batch.table, specs, batch.source, batch.first_row, True, batch.rows)

    return encode


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.just(SHORT), st.none()),
        min_size=1,
        max_size=80,
    ),
    first_row=st.integers(0, 10_000),
)
def test_isolate_bad_rows_finds_exactly_the_bad_ones(values, first_row):
    table = pa.table({"n": pairs(values), "i": pa.array(range(len(values)))})
    specs = plan_features(table.schema, {"n": ColumnOptions(null_policy="fail", shape=[1, 2])})
    batch = TableBatch(table, "t.parquet", first_row)
    result, bad = isolate_bad_rows(batch, _encoder(specs), "encode")
    expected_bad = [i for i, v in enumerate(values) if v is None or v == SHORT]
    assert [r["row"] for r in bad] == [first_row + i for i in expected_bad]
    assert all(r["column"] == "n" and r["source"] == "t.parquet" for r in bad)
    assert [r["values"]["i"] for r in bad] == expected_bad
    good = [i for i in range(len(values)) if i not in expected_bad]
    if not good:
        assert result is None
        return
    encoded, stats = result
    assert stats.rows == len(good) == encoded.num_records
    good_batch = TableBatch(table.take(good), "t.parquet", 0)
    assert bytes(encoded.buffer) == bytes(_encoder(specs)(good_batch)[0].buffer)


def test_good_batch_stays_on_the_fast_path():
    calls = []

    def fn(batch):
        calls.append(batch.table.num_rows)
        return batch.table.num_rows

    batch = TableBatch(pa.table({"n": list(range(100))}), "t", 0)
    assert isolate_bad_rows(batch, fn, "encode") == (100, [])
    assert calls == [100]


def test_a_batch_of_no_rows_that_fails_is_not_a_rows_fault():
    def fn(batch):
        raise ConversionError("t: no rows")

    batch = TableBatch(pa.table({"n": pa.array([], pa.int64())}), "t", 0)
    with pytest.raises(ConversionError, match="t: no rows"):  # not a bisection without end
        isolate_bad_rows(batch, fn, "encode")


@pytest.mark.parametrize(
    ("bad", "good", "rows", "fraction", "fails"),
    [
        (0, 10, 0, 0.0, False),
        (1, 10, 0, 0.0, True),
        (3, 97, 3, 0.0, False),
        (4, 96, 3, 0.0, True),
        (2, 98, 0, 0.02, False),
        (3, 97, 0, 0.02, True),
        (3, 97, 5, 0.01, False),  # either limit lets it pass
    ],
)
def test_threshold(bad, good, rows, fraction, fails):
    if fails:
        with pytest.raises(BadRowsError, match=f"{bad} bad row"):
            check_bad_rows(bad, good, rows, fraction, "f: row 1: x", "out/_errors")
    else:
        check_bad_rows(bad, good, rows, fraction, "f: row 1: x", "out/_errors")


def test_threshold_config_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="max_bad_fraction"):
        load_config(None, {"input": ["x"], "output": "o", "max_bad_fraction": 1.5})
    with pytest.raises(ConfigError, match="max_bad_rows"):
        load_config(None, {"input": ["x"], "output": "o", "max_bad_rows": -1})


# ----------------------------------------------------------------------------- whole job


def test_parquet_bad_rows_allowed_by_max_bad_rows(tmp_path):
    values = [[[i, i]] for i in range(1000)]
    values[10], values[777] = [[10]], [[777, 1, 2]]  # the shape is [1, 2] (configured)
    path = tmp_path / "t.parquet"
    n = pa.array(values, pa.list_(pa.list_(pa.int64())))
    pq.write_table(pa.table({"id": range(1000), "n": n}), path, row_group_size=300)
    code, out = convert_shaped(tmp_path, path, "--max-bad-rows", "2", "--batch-rows", "128")
    assert code == EXIT_OK
    errors = error_records(out)
    assert [(e["row"], e["column"], e["stage"]) for e in errors] == [
        (10, "n", "encode"),
        (777, "n", "encode"),
    ]
    assert errors[1]["values"] == {"id": 777, "n": [[777, 1, 2]]}
    assert "length 3" in errors[1]["reason"] and str(path) in errors[1]["reason"]
    ids = sorted(r["id"][0] for r in read_output(out))
    assert ids == [i for i in range(1000) if i not in (10, 777)]
    manifest = read_manifest(out)
    assert manifest["rows"] == 998
    assert manifest["bad_rows"]["count"] == 2
    assert all((out / f).exists() for f in manifest["bad_rows"]["files"])


def test_over_the_threshold_writes_errors_and_no_manifest(tmp_path, capsys):
    values: list = list(range(100))
    values[5] = values[50] = SHORT
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": pairs(values)}), path)
    code, out = convert_shaped(tmp_path, path, "--max-bad-fraction", "0.01")
    assert code == EXIT_FAILED
    assert not (out / "manifest.json").exists()
    assert [e["row"] for e in error_records(out)] == [5, 50]
    err = capsys.readouterr().err
    assert "2 bad row(s) of 100" in err and "row 5" in err and "_errors" in err
    code, out = convert_shaped(tmp_path, path, "--max-bad-fraction", "0.02", "--overwrite")
    assert code == EXIT_OK and read_manifest(out)["bad_rows"]["count"] == 2


def test_csv_rows_with_the_wrong_number_of_fields(tmp_path):
    lines = ["id,name"]
    for i in range(40):
        lines.append(f'{i},"two\nlines {i}"' if i == 3 else f"{i},n{i}")
    lines[1 + 7] = "7,n7,extra"
    lines[1 + 30] = "30"
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = convert(tmp_path, path, "--max-bad-rows", "2", "--batch-rows", "8")
    assert code == EXIT_OK
    errors = error_records(out)
    assert [(e["row"], e["column"], e["stage"]) for e in errors] == [
        (7, None, "read"),
        (30, None, "read"),
    ]
    assert errors[0]["values"] == {"text": "7,n7,extra"} and "3 fields" in errors[0]["reason"]
    ids = sorted(r["id"][0] for r in read_output(out))
    assert ids == [i for i in range(40) if i not in (7, 30)]


def test_csv_unparsable_values_and_row_numbers_after_a_skipped_row(tmp_path):
    lines = ["n,s"] + [f"{i},row {i}" for i in range(3000)]
    lines[1 + 100] = "100,row 100,extra"  # wrong number of fields, before the bad values
    lines[1 + 2600] = "many,row 2600"
    lines[1 + 2900] = "9.5,row 2900"
    path = tmp_path / "late.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        "csv:\n  column_types: {n: int64}\n  infer_bytes: 4096\n  block_bytes: 4096\n",
        encoding="utf-8",
    )
    code, out = convert(tmp_path, path, "--config", str(config), "--max-bad-rows", "3")
    assert code == EXIT_OK
    errors = error_records(out)
    assert [(e["row"], e["column"]) for e in errors] == [(100, None), (2600, "n"), (2900, "n")]
    assert errors[1]["values"] == {"n": "many", "s": "row 2600"}
    assert "'many'" in errors[1]["reason"] and "int64" in errors[1]["reason"]
    records = read_output(out)
    by_n = {r["n"][0]: r["s"][0] for r in records}
    expected = {i: f"row {i}".encode() for i in range(3000) if i not in (100, 2600, 2900)}
    assert by_n == expected


def test_a_row_a_transform_step_fails_on(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,code\n0,1\n1,x\n2,3\n3,4.5\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        "csv:\n  column_types: {code: string}\ntransforms:\n  - cast: {column: code, to: int64}\n",
        encoding="utf-8",
    )
    code, out = convert(tmp_path, path, "--config", str(config), "--max-bad-rows", "2")
    assert code == EXIT_OK
    errors = error_records(out)
    assert [(e["row"], e["column"], e["stage"]) for e in errors] == [
        (1, "code", "transform"),
        (3, "code", "transform"),
    ]
    assert errors[0]["values"] == {"id": 1, "code": "x"}
    assert sorted(r["id"][0] for r in read_output(out)) == [0, 2]


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_bad_rows_come_out_exactly_in_errors(tmp_path_factory, data):
    """Random bad rows of every kind mixed into good CSV data: exactly the bad rows are in
    `_errors`, exactly the good rows in the records."""
    tmp_path = tmp_path_factory.mktemp("mixed")
    n = data.draw(st.integers(1, 300), label="rows")
    kinds = data.draw(
        st.lists(
            st.sampled_from(["good", "good", "good", "fields", "value", "null", "big"]),
            min_size=n,
            max_size=n,
        ),
        label="kinds",
    )
    lines = ["id,n,tag"]
    for i, kind in enumerate(kinds):
        lines.append(
            {
                "good": f"{i},{i * 7},t{i}",
                "fields": f"{i},{i},t{i},extra",
                "value": f"{i},x{i},t{i}",
                "null": f"{i},{i},",
                "big": f"{i},{2**64},t{i}",  # past uint64
            }[kind]
        )
    path = tmp_path / "mixed.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        "csv:\n  column_types: {id: int64, n: uint64, tag: string}\n  block_bytes: 1024\n"
        "columns:\n  tag: {null_policy: fail}\n",
        encoding="utf-8",
    )
    bad = [i for i, k in enumerate(kinds) if k != "good"]
    out = tmp_path / "out"
    args = ["convert", "--input", path, "--output", out, "--config", config]
    code = run_cli([*args, "--max-bad-rows", str(len(bad)), "--batch-rows", "16"])
    assert code == EXIT_OK
    assert [e["row"] for e in error_records(out)] == bad
    good = [(i, i * 7, f"t{i}".encode()) for i, k in enumerate(kinds) if k == "good"]
    got = sorted((r["id"][0], r["n"][0], r["tag"][0]) for r in read_output(out))
    assert got == good
    assert read_manifest(out)["rows"] == len(good)


BAD_ROWS = [
    {"source": "b.csv", "row": 3, "column": "x", "stage": "read", "reason": "late", "values": {}},
    {"source": "a.csv", "row": None, "column": None, "stage": "read", "reason": "z", "values": []},
    {"source": "a.csv", "row": 7, "column": "é", "stage": "encode", "reason": "y\nz", "values": {
        "x": b"\xff".decode("latin-1"), "n": None}},
    {"source": "a.csv", "row": 7, "column": "x", "stage": "transform", "reason": "a",
     "values": {"d": 1.5}},
]  # fmt: skip


@pytest.mark.parametrize("rows", [BAD_ROWS, BAD_ROWS[:1], []])
def test_plain_error_files_and_count_equal_the_beam_transforms(tmp_path, rows):
    """`write_error_lines` and `first_bad_row` (for a job run without Beam) give what
    `WriteErrors` (one shard) and `CountBadRows` give."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.deadletter import first_bad_row, write_error_lines
    from transforms.deadletter.beam import CountBadRows, WriteErrors

    beam_dir, plain_dir = tmp_path / "beam" / "_errors", tmp_path / "plain" / "_errors"
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        bad = p | beam.Create(rows, reshuffle=False)
        _ = bad | WriteErrors(str(beam_dir) + "/")
        counted = bad | beam.CombineGlobally(CountBadRows())
        assert_that(counted, equal_to([first_bad_row(rows)]))
    written = write_error_lines(str(plain_dir) + "/", iter(rows))
    beam_files = sorted(beam_dir.glob("*")) if beam_dir.exists() else []
    assert [Path(p).name for p in written] == [f.name for f in beam_files]
    assert [Path(p).read_bytes() for p in written] == [f.read_bytes() for f in beam_files]
    if rows:
        assert written == [f"{plain_dir}/errors-00000-of-00001.jsonl"]
        lines = Path(written[0]).read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == rows
    assert first_bad_row(BAD_ROWS) == (4, "z")  # a.csv, row unknown (-1) comes first


def test_a_short_row_of_a_compressed_csv_is_a_bad_row(tmp_path):
    """pyarrow skips a row with too few fields, and the reader finds its number by reading the
    file with Python's csv module: through the file's decompression for a .csv.gz."""
    import gzip

    lines = ["a,b", *[f"{i},{i * 2}" for i in range(50)]]
    lines[31] = "30"  # data row 30: one field
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    code, out = convert(tmp_path, path, "--max-bad-rows", "1")
    assert code == EXIT_OK
    (bad,) = error_records(out)
    assert bad["row"] == 30 and bad["source"] == str(path)
    assert "1 fields where the header has 2" in bad["reason"]
    assert sorted(r["a"][0] for r in read_output(out)) == [i for i in range(50) if i != 30]
