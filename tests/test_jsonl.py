"""JSON Lines inputs (transforms/read/json_reader.py): types as for CSV (configured, else
inferred from the first file), bad lines to the dead-letter output with their line number and
text, a whole run with a gzipped file and a bad line in `_errors/`."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pytest
from conftest import read_manifest, read_output, run_cli_captured

import transforms.read.json_reader as json_reader
from transforms.encode.schema import ConversionError
from transforms.read.inputs import detect_format
from transforms.read.json_reader import json_batches, json_schema


def _write(path, lines: list[str]) -> str:
    data = "".join(line + "\n" for line in lines).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def test_format_from_the_name():
    assert detect_format(["a.jsonl", "b.JSONL.gz", "c.ndjson"], None) == "jsonl"
    assert detect_format(["a.txt"], "jsonl") == "jsonl"


def test_schema_inferred_configured_and_null_fields_as_text(tmp_path):
    path = _write(
        tmp_path / "a.jsonl",
        [
            '{"id": 1, "fare": 2.5, "name": "x", "tags": ["a"], "pos": {"x": 1.0}, "gone": null}',
            '{"id": 2, "fare": 3, "name": null, "tags": [], "pos": {"x": 2.5}, "gone": null}',
        ],
    )
    schema = json_schema(path, {})
    assert schema == pa.schema(
        [
            ("id", pa.int64()),
            ("fare", pa.float64()),
            ("name", pa.string()),
            ("tags", pa.list_(pa.string())),
            ("pos", pa.struct([("x", pa.float64())])),
            ("gone", pa.string()),  # no value in the sample: text, as for CSV
        ]
    )
    configured = json_schema(path, {"id": pa.int32(), "extra": pa.float32()})
    assert configured.field("id").type == pa.int32()
    assert configured.field("extra").type == pa.float32()  # absent from the sample: a column
    assert configured.names == ["id", "extra", "fare", "name", "tags", "pos", "gone"]


def test_a_field_of_two_kinds_needs_a_type_and_then_its_other_kind_is_bad(tmp_path):
    lines = ['{"code": 1, "n": 0}', '{"code": "A7", "n": 1}', '{"code": 3, "n": 2}']
    path = _write(tmp_path / "a.jsonl", lines)
    with pytest.raises(ValueError, match=r"a.jsonl: cannot infer .* \(set columns.code.type\)"):
        json_schema(path, {})
    schema = json_schema(path, {"code": pa.string()})
    assert schema == pa.schema([("code", pa.string()), ("n", pa.int64())])  # configured first
    bad: list[dict] = []
    rows = [r for b in json_batches(path, 0, schema, 10, bad.append) for r in b.table.to_pylist()]
    assert rows == [{"code": "A7", "n": 1}]  # pyarrow reads no number as text
    assert [(r["row"], r["column"], r["values"]["line"]) for r in bad] == [
        (0, "code", 1),
        (2, "code", 3),
    ]
    assert "cannot convert 1 to string (set columns.code.type)" in bad[0]["reason"]


BAD_FILE = [
    '{"id": 0, "n": 10, "s": "a"}',
    "",
    '{"id": 1, "n": 11, "s": "b"}',
    '{"id": 2, "n": 12, "s": "c"',  # not JSON: line 4
    '{"id": 3, "n": "many", "s": "d"}',  # does not convert: line 5
    "   ",
    '{"id": 4, "n": 14, "s": "e", "x": 1}',  # a field that is not a column: line 7
    '{"id": 5, "n": 15, "s": "f"}',
    "[5, 6]",  # not an object: line 9
    '{"id": 6, "n": null}',
]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("block", [1 << 20, 64])  # one block; a block of a line or two
def test_bad_lines_go_to_the_dead_letter_output(tmp_path, monkeypatch, suffix, block):
    monkeypatch.setattr(json_reader, "BLOCK_BYTES", block)
    path = _write(tmp_path / f"bad{suffix}", BAD_FILE)
    schema = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("s", pa.string())])
    bad: list[dict] = []
    batches = list(json_batches(path, 0, schema, 2, bad.append))
    rows = [r for b in batches for r in b.table.to_pylist()]
    assert rows == [
        {"id": 0, "n": 10, "s": "a"},
        {"id": 1, "n": 11, "s": "b"},
        {"id": 5, "n": 15, "s": "f"},
        {"id": 6, "n": None, "s": None},
    ]
    source_rows = [int(r) for b in batches for r in json_reader.source_rows(b)]
    assert source_rows == [0, 1, 5, 7]  # data rows: blank lines are not rows
    assert all(b.table.schema == schema for b in batches)
    found = {(r["row"], r["values"]["line"]): r for r in bad}
    assert sorted(found) == [(2, 4), (3, 5), (4, 7), (6, 9)]
    for (row, line), record in found.items():
        assert record["source"] == path and record["stage"] == "read"
        assert record["values"]["text"] == BAD_FILE[line - 1]
        assert record["reason"].startswith(f"{path}: row {row}")
        assert f"line {line}: " in record["reason"]
    assert "not valid JSON Lines" in found[2, 4]["reason"] and found[2, 4]["column"] is None
    assert found[3, 5]["column"] == "n"
    assert "cannot convert 'many' to int64 (set columns.n.type)" in found[3, 5]["reason"]
    assert found[4, 7]["column"] == "x" and "not a column of the input" in found[4, 7]["reason"]
    assert found[6, 9]["column"] is None


def test_without_a_dead_letter_output_the_first_bad_line_fails_the_read(tmp_path):
    path = _write(tmp_path / "bad.jsonl", BAD_FILE)
    schema = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("s", pa.string())])
    with pytest.raises(ConversionError, match=r"bad.jsonl: row 2: line 4: not valid JSON"):
        list(json_batches(path, 0, schema, 100, None))


def test_run_with_a_bad_line(tmp_path):
    lines = [json.dumps({"id": i, "fare": i / 4, "who": f"p{i}"}) for i in range(200)]
    lines[150] = '{"id": 150, "fare": 37.5, "who": "p150"'  # cut short
    (tmp_path / "in").mkdir()
    good = _write(tmp_path / "in" / "a.jsonl.gz", lines)
    other = _write(tmp_path / "in" / "b.jsonl", [json.dumps({"id": 200, "fare": None})])
    out = tmp_path / "out"
    result = run_cli_captured(
        ["convert", "--input", tmp_path / "in", "--output", out, "--max-bad-rows", "1"]
    )
    assert result.code == 0, result.err
    assert {good, other} == set(read_manifest(out)["sources"])
    assert read_manifest(out)["source_format"] == "jsonl"
    records = sorted(read_output(out), key=lambda r: r["id"])
    assert [r["id"][0] for r in records] == [i for i in range(201) if i != 150]
    assert records[0] == {"id": [0], "fare": [0.0], "who": [b"p0"]}
    assert records[-1] == {"id": [200]}  # nulls: absent features
    (error_file,) = (out / "_errors").glob("*.jsonl")
    (error,) = [json.loads(x) for x in error_file.read_text(encoding="utf-8").splitlines()]
    assert error["source"] == good and error["row"] == 150
    assert error["values"] == {"line": 151, "text": lines[150]}
    verified = run_cli_captured(["verify", out, "--source"])  # the bad line found again
    assert verified.code == 0, verified.out + verified.err


@pytest.mark.parametrize("schema", ["strict", "unify"])
@pytest.mark.parametrize("first", ["", "\n \n"], ids=["empty", "blank"])
def test_a_file_with_no_line_has_no_rows_and_the_fields_come_from_the_next(tmp_path, schema, first):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text(first, encoding="utf-8")  # the first file the plan reads
    _write(folder / "b.jsonl", ['{"id": 0, "n": 0}', '{"id": 1, "n": null}', '{"id": 2}'])
    out = tmp_path / "out"
    result = run_cli_captured(
        ["convert", "--input", f"{folder}/*.jsonl", "--output", out, "--schema", schema]
    )
    assert result.code == 0, result.err
    assert sorted(read_output(out), key=lambda r: r["id"]) == [
        {"id": [0], "n": [0]},  # a zero is a value
        {"id": [1]},
        {"id": [2]},
    ]
    assert read_manifest(out)["rows"] == 3


@pytest.mark.parametrize("schema", ["strict", "unify"])
def test_no_line_in_any_file_fails_the_plan_naming_them(tmp_path, schema):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"")
    (folder / "b.jsonl").write_bytes(b"\n")
    out = tmp_path / "out"
    result = run_cli_captured(
        ["convert", "--input", f"{folder}/*.jsonl", "--output", out, "--schema", schema]
    )
    assert result.code == 2
    assert f"no line in the 2 JSON Lines files ({folder}/a.jsonl, {folder}/b.jsonl)" in result.err
    assert not out.exists() or not any(out.iterdir())


def test_no_good_line_in_the_sample_says_why_the_first_fails(tmp_path):
    path = _write(tmp_path / "a.jsonl", ['{"a": 1, "a": 2}', "not json"])
    with pytest.raises(ValueError, match=r"a.jsonl: no line .* line 1: .*specified twice"):
        json_schema(path, {})
