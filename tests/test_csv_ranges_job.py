"""A large CSV file read as byte ranges by several work items (`csv.range_bytes`): the job writes
the records, statistics and bad rows it writes reading the file whole (every row with its
number in the file), the same bytes on any number of workers and on Beam."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import run_cli_captured
from test_workers import files_of

from pipeline.reader import load_dataset

ROWS = 4000
BAD_FIELDS = (2500, 3103)  # rows with fields too few (the second in the range of ...)
BAD_VALUE = 3100  # ... an id that is not a number


def _name(rng: random.Random, i: int) -> str:
    kind = i % 6
    if kind == 0:
        return f'"line one\nline {i}, ""quoted"""'  # a line break, a comma, doubled quotes
    if kind == 1:
        return ""  # null
    if kind == 2:
        return '""'  # the empty string
    if kind == 3:
        return f'5"{i}'  # a quote inside an unquoted value: a plain character
    return "".join(rng.choice("abcdef ") for _ in range(rng.randrange(1, 12)))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    rng = random.Random(11)
    lines = ["id,x,name,flag"]
    for i in range(ROWS):
        if i in BAD_FIELDS:
            lines.append(f"{i},1.5")
            continue
        ident = "zz" if i == BAD_VALUE else str(i)
        x = "" if i % 9 == 0 else ("0" if i % 9 == 1 else f"{rng.uniform(-5, 5):.6f}")
        lines.append(f"{ident},{x},{_name(rng, i)},{i % 2}")
        if i % 500 == 7:
            lines.append("")  # an empty line: no row
    path = tmp_path_factory.mktemp("ranges") / "big.csv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return path


def _config(range_bytes: int) -> dict:
    return {"csv": {"range_bytes": range_bytes, "column_types": {"id": "int64"}}}


def _convert(source, out, range_bytes, *flags, workers=2):
    config = Path(str(out) + ".yaml")
    config.write_text(json.dumps(_config(range_bytes)), encoding="utf-8")
    args = ["convert", "--input", source, "--output", out, "--config", config,
            "--workers", str(workers), "--max-bad-rows", "10", *flags]  # fmt: skip
    result = run_cli_captured(args)
    assert result.code == 0, result.err
    return out


def _records(out: Path) -> list[bytes]:
    files = sorted(str(p) for p in out.glob("train-*.tfrecord*"))
    return list(tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator())


def _errors(out: Path) -> list[dict]:
    rows = [json.loads(line) for p in sorted(out.glob("_errors/*")) for line in p.open()]
    return sorted(rows, key=lambda r: r["row"])


def _numeric_stats(out: Path) -> dict[str, tuple[str, float]]:
    """Per numeric feature: what its statistics take from the rows' sample and counts (text),
    and its mean."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = statistics_pb2.DatasetFeatureStatisticsList()
    stats.ParseFromString((out / "statistics/train/FeatureStats.pb").read_bytes())
    found = {}
    for feature in stats.datasets[0].features:
        if feature.HasField("num_stats"):
            num = feature.num_stats
            kept = (num.common_stats, num.median, num.num_zeros, num.min, num.max)
            text = str(kept) + "".join(str(h) for h in num.histograms)
            found[feature.path.step[0]] = (text, num.mean)
    return found


def test_the_plan_cuts_the_file_and_counts_its_rows(source, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(_config(4096)), encoding="utf-8")
    result = run_cli_captured(
        ["plan", "--input", source, "--output", tmp_path / "p", "--config", config, "--json"]
    )
    assert result.code == 0, result.err
    plan = json.loads(result.out)
    assert plan["work"]["work_items"] >= 20
    assert plan["read"]["rows"] == ROWS and plan["read"]["rows_exact"]


def test_ranges_write_what_the_whole_file_writes(source, tmp_path):
    whole = _convert(source, tmp_path / "whole", 0)
    cut = _convert(source, tmp_path / "cut", 4096)
    assert _records(cut) == _records(whole)
    assert len(_records(cut)) == ROWS - 3
    assert (cut / "schema.pbtxt").read_bytes() == (whole / "schema.pbtxt").read_bytes()
    # the statistics' sample takes rows by their number in the file: its quantiles and
    # medians are equal only if every range knew its first row (the means differ in their
    # last bits, summed in other batches; the top values' counts are a sketch's, merged
    # over other work items)
    ours, theirs = _numeric_stats(cut), _numeric_stats(whole)
    assert ours.keys() == theirs.keys() == {"id", "x", "flag"}
    for name, (sample, mean) in ours.items():
        assert sample == theirs[name][0], name
        assert mean == pytest.approx(theirs[name][1], rel=1e-12), name
    errors = _errors(cut)
    assert errors == _errors(whole)
    assert [(e["row"], e["column"]) for e in errors] == [
        (BAD_FIELDS[0], None), (BAD_VALUE, "id"), (BAD_FIELDS[1], None)
    ]  # fmt: skip
    manifest = json.loads((cut / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["rows"] == ROWS - 3 and manifest["bad_rows"]["count"] == 3

    (batch,) = load_dataset(str(cut), batch_size=ROWS)
    ids = batch["id"].numpy().tolist()
    assert ids == [i for i in range(ROWS) if i not in (*BAD_FIELDS, BAD_VALUE)]
    names = [v.decode() for v in batch["name"].numpy().tolist()]
    assert names[0] == 'line one\nline 0, "quoted"'
    assert names[3] == '5"3' and names[2] == ""
    x = batch["x"].numpy()
    assert x[1] == 0.0  # a zero stays a zero


def test_ranges_on_any_number_of_workers_and_on_beam(source, tmp_path):
    outs = {}
    for workers in (1, 3):
        found = files_of(_convert(source, tmp_path / f"w{workers}", 4096, workers=workers))
        manifest = json.loads(found["manifest.json"])
        manifest["bad_rows"].pop("files")  # paths in the output
        found["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
        outs[workers] = found
    assert outs[1] == outs[3]
    beam = _convert(source, tmp_path / "beam", 4096, "--engine", "beam")
    theirs = files_of(beam)
    shards = [name for name in outs[1] if name.startswith("train-")]
    assert shards and all(outs[1][name] == theirs[name] for name in shards)
    assert _errors(beam) == _errors(tmp_path / "w1")


def test_a_compressed_or_small_file_is_read_whole(source, tmp_path):
    import gzip

    packed = tmp_path / "big.csv.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(_config(4096)), encoding="utf-8")

    def items(path: Path) -> int:
        result = run_cli_captured(
            ["plan", "--input", path, "--output", tmp_path / "p", "--config", config, "--json"]
        )
        assert result.code == 0, result.err
        return json.loads(result.out)["work"]["work_items"]

    assert items(packed) == 1 and items(source) > 1
    config.write_text(json.dumps(_config(source.stat().st_size * 2 // 3 + 1)), encoding="utf-8")
    assert items(source) == 1  # not past 1.5 ranges


@pytest.mark.parametrize("value", [-1, "64MiB", True])
def test_a_bad_range_size_is_a_config_error(source, tmp_path, value):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"csv": {"range_bytes": value}}), encoding="utf-8")
    result = run_cli_captured(
        ["plan", "--input", source, "--output", tmp_path / "p", "--config", config]
    )
    assert result.code != 0 and "csv.range_bytes" in result.err


def test_a_range_that_no_longer_holds_the_rows_counted_fails_the_read(source, tmp_path):
    """A file that changed between the plan and the read: its range's rows are not those the
    plan counted, and the read fails naming the bytes, rather than lose or repeat a row."""
    import pyarrow as pa

    from transforms.read.delimited.ranges import csv_ranges
    from transforms.read.delimited.reader import CsvOptions, csv_batches

    path = tmp_path / "changing.csv"
    path.write_bytes(b"a,b\n" + b"".join(b"%d,%d\n" % (i, i) for i in range(400)))
    part = csv_ranges(str(path), ",", '"', None, True, 1000)[1]
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])

    def read() -> int:
        batches = csv_batches(str(path), part.first_row, schema, CsvOptions(), 100, [].append, part)
        return sum(b.table.num_rows for b in batches)

    assert read() == part.rows
    data = path.read_bytes()
    path.write_bytes(data[: part.start] + b"7,7\n" + data[part.start :])  # a row more in front
    with pytest.raises(ValueError, match=r"bytes [\d,]+-[\d,]+ hold \d+ rows where the plan"):
        read()


@pytest.mark.parametrize(
    "options",
    [
        {"header": False, "column_names": ["x", "y", "z"]},  # no header line: none read first
        {"header": True, "column_names": ["x", "y", "z"]},  # the header line read, then skipped
    ],
)
def test_ranges_with_named_columns_and_partitions(tmp_path, options):
    """A header-less file and a renamed header, in two Hive partitions: ranges read what the
    whole files read (the partition keys appended to every range's rows)."""
    source = tmp_path / "in"
    for day in (1, 2):
        folder = source / f"day={day}"
        folder.mkdir(parents=True)
        lines = [f'{i},"t {i}\nx",{i * day * 0.5}' for i in range(1500)]
        if options["header"]:
            lines.insert(0, "a,b,c")
        (folder / "part.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = {}
    for range_bytes in (0, 4096):
        config = tmp_path / f"c{range_bytes}.yaml"
        config.write_text(json.dumps({"csv": {**options, "range_bytes": range_bytes}}))
        out = tmp_path / f"o{range_bytes}"
        args = ["convert", "--input", source, "--output", out, "--config", config]
        result = run_cli_captured(args)
        assert result.code == 0, result.err
        plan = run_cli_captured(["plan", *args[1:], "--json"])
        assert (json.loads(plan.out)["work"]["work_items"] > 2) == (range_bytes > 0)
        (batch,) = load_dataset(str(out), batch_size=10_000)
        got[range_bytes] = {k: v.numpy().tolist() for k, v in batch.items()}
    assert got[4096] == got[0]
    assert got[0]["x"] == [*range(1500), *range(1500)]
    assert got[0]["day"] == [1] * 1500 + [2] * 1500
    assert got[0]["y"][1499] == b"t 1499\nx"


def test_json_lines_ranges_write_what_the_whole_file_writes(tmp_path, monkeypatch):
    """A JSON Lines file cut into byte ranges at line starts: the records, and the bad lines
    with their row and line numbers, are those of the whole file, on any number of workers."""
    from transforms.read.delimited import ranges

    lines = []
    for i in range(3000):
        if i % 400 == 3:
            lines.append("")  # a blank line: a line, not a row
        if i == 1700:
            lines.append('{"id": 1700, "x": 0.5, "s": "cut')  # not JSON
        elif i == 2600:
            lines.append('{"id": 2600, "x": "many", "s": "t"}')  # does not convert
        else:
            x = 0 if i % 5 == 0 else i / 8
            lines.append(json.dumps({"id": i, "x": x, "s": f"line {i}\nof {i % 7}"}))
    source = tmp_path / "big.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text("columns: {x: {type: float64}}\n", encoding="utf-8")

    def run(name: str, workers: int) -> Path:
        out = tmp_path / name
        args = ["convert", "--input", source, "--output", out, "--config", config,
                "--workers", str(workers), "--max-bad-rows", "5"]  # fmt: skip
        result = run_cli_captured(args)
        assert result.code == 0, result.err
        return out

    whole = run("whole", 2)
    monkeypatch.setattr(ranges, "JSON_RANGE_BYTES", 8192)
    plan = run_cli_captured(
        ["plan", "--input", source, "--output", tmp_path / "p", "--config", config, "--json"]
    )
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["work"]["work_items"] >= 10
    cut = {w: run(f"cut{w}", w) for w in (1, 3)}
    assert _records(cut[1]) == _records(whole)
    assert len(_records(whole)) == 2998
    errors = _errors(cut[1])
    assert errors == _errors(whole) == _errors(cut[3])
    assert [(e["row"], e["values"]["line"]) for e in errors] == [(1700, 1706), (2600, 2608)]
    assert _records(cut[3]) == _records(cut[1])
