"""`tfrecord-etl verify`: a clean output passes (CSV and Parquet, splits, transforms with an
analyzer, bad rows in _errors/), and each fault is found and named by shard and record or by
source file and row: a flipped byte, a truncated, deleted or stale shard, a record removed,
duplicated, moved to another split or added, a source value changed after the run, a manifest
edited (counts, features, null counts), the error files changed."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli_captured
from google.protobuf.message import DecodeError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.output.manifest import StoredFeature
from pipeline.verify.against_source.source import sample_rows
from pipeline.verify.records import read_frames
from pipeline.verify.report import format_report
from pipeline.verify.run import SourceRequest, verify_output
from transforms.write.tfrecord import masked_crc

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ROWS = 240
TRANSFORMS = """transforms:
  - fill_missing: {column: name, value: "(none)"}
  - filter: {expr: "fare > 0"}
  - zscore: {column: fare, output: fare_z}
"""


def _csv_text() -> str:
    lines = ["id,name,fare,n"]
    for i in range(ROWS):
        name = "" if i % 7 == 0 else f"name {i % 13}"
        fare = "" if i % 11 == 0 else f"{(i % 17) * 1.25 - 2.5}"
        n = "many" if i == 50 else str(i * 3)
        lines.append(f"{i},{name},{fare},{n}")
    lines.insert(100, "999,too,many,fields,here")  # a row with the wrong number of fields
    return "\n".join(lines) + "\n"


def _parquet_table() -> pa.Table:
    ids = np.arange(ROWS)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [None if i % 7 == 0 else f"name {i % 13}" for i in ids],
            "fare": [None if i % 11 == 0 else (i % 17) * 1.25 - 2.5 for i in ids],
            "n": pa.array(ids * 3, pa.int64()),
            "tags": [[f"t{j}" for j in range(i % 4)] for i in ids],
            "grid": pa.array([[i, i + 1, i + 2, i + 3] for i in ids], pa.list_(pa.int32(), 4)),
        }
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verify")


def _convert(*args) -> None:
    result = run_cli_captured(["convert", *args])
    assert result.code == EXIT_OK, result.err


@pytest.fixture(scope="module")
def csv_out(work) -> Path:
    """CSV, gzip in several members (batches of 32 rows), transforms with an analyzer, two bad
    rows in _errors/, rows dropped by a filter."""
    source = work / "trips.csv"
    source.write_text(_csv_text(), encoding="utf-8")
    config = work / "csv.yaml"
    config.write_text("csv: {column_types: {n: int64}}\n" + TRANSFORMS, encoding="utf-8")
    out = work / "csv-out"
    _convert("--input", source, "--output", out, "--config", config, "--batch-rows", "32",
             "--max-bad-rows", "5")  # fmt: skip
    return out


@pytest.fixture(scope="module")
def parquet_out(work, csv_out) -> Path:
    """Parquet, uncompressed, two splits by a key, two shards each, the CSV run's analyzer."""
    source = work / "trips.parquet"
    pq.write_table(_parquet_table(), source, row_group_size=100)
    config = work / "parquet.yaml"
    config.write_text(
        "splits: {train: 3, eval: 1}\nsplit_key: id\nsplit_salt: v\n" + TRANSFORMS,
        encoding="utf-8",
    )
    out = work / "parquet-out"
    _convert("--input", source, "--output", out, "--config", config, "--compression", "none",
             "--num-shards", "2", "--transform-artifacts", csv_out)  # fmt: skip
    return out


@pytest.fixture
def copy(tmp_path):
    def make(out: Path) -> Path:
        target = tmp_path / out.name
        shutil.copytree(out, target)
        return target

    return make


def verify(*args) -> tuple[int, str, dict]:
    """Run the real CLI; (exit code, stdout, the JSON summary line)."""
    result = run_cli_captured(["verify", *args])
    lines = result.out.strip().splitlines()
    return result.code, result.out + result.err, json.loads(lines[-1]) if lines else {}


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def edit_manifest(out: Path, change) -> None:
    data = manifest(out)
    change(data)
    (out / "manifest.json").write_text(json.dumps(data), encoding="utf-8")


def shards(out: Path, split: str = "train") -> list[Path]:
    return [out / f for f in manifest(out)["splits"][split]["files"]]


def records(path: Path, compression: str) -> list[bytes]:
    return [data for _, _, data, _ in read_frames(str(path), compression)]


def write_records(path: Path, items: list[bytes], compression: str) -> None:
    framed = b"".join(
        struct.pack("<Q", len(r)) + struct.pack("<I", masked_crc(struct.pack("<Q", len(r))))
        + r + struct.pack("<I", masked_crc(r))
        for r in items
    )  # fmt: skip
    path.write_bytes(gzip.compress(framed) if compression == "gzip" else framed)


def record_id(data: bytes) -> int:
    import tensorflow as tf

    return tf.train.Example.FromString(data).features.feature["id"].int64_list.value[0]


# ----------------------------------------------------------------------------- clean outputs


def test_clean_csv_output_passes_with_its_source(csv_out):
    code, out, line = verify(csv_out, "--source")
    assert code == EXIT_OK, out
    assert "result: passed (no finding)" in out
    m = manifest(csv_out)
    assert m["bad_rows"]["count"] == 2 and len(m["config"]["transforms"]) == 3
    assert line["status"] == "passed" and line["command"] == "verify"
    assert line["records_read"] == {"train": m["rows"]} and line["finding_counts"] == {}
    report = verify_output(str(csv_out), SourceRequest())
    source = report.checked["source"]
    assert source["rows_compared"] == m["rows"] and source["rows_bad"] == 2
    assert source["rows_filtered"] > 0  # fare <= 0 or null


def test_clean_parquet_output_passes(parquet_out):
    code, out, line = verify(parquet_out, "--source", "--json")
    assert code == EXIT_OK, out
    assert line["result"] == "passed" and line["findings"] == []
    assert set(line["records_read"]) == {"train", "eval"}
    assert sum(line["records_read"].values()) == manifest(parquet_out)["rows"]
    assert line["checked"]["source"]["config_from"].endswith("manifest.json: key 'config'")
    code, out, _ = verify(parquet_out)
    assert code == EXIT_OK and "source: not compared" in out


def test_whole_row_splits_fitted_on_train_and_shuffled_pass(work, tmp_path):
    """Splits without a key, an analyzer fitted on the train split in the same run, the train
    split shuffled into sized shards: the derivation finds every record in its split."""
    source = work / "whole-row.parquet"
    pq.write_table(_parquet_table(), source, row_group_size=60)
    config = tmp_path / "c.yaml"
    config.write_text(
        "splits: {train: 3, eval: 1}\nshuffle: [train]\nshuffle_seed: 5\n" + TRANSFORMS,
        encoding="utf-8",
    )
    out = tmp_path / "out"
    _convert("--input", source, "--output", out, "--config", config, "--shard-mb", "0.01")
    assert manifest(out)["transform"]["fitted_on_split"] == "train"
    code, text, line = verify(out, "--source")
    assert code == EXIT_OK, text
    assert sum(line["records_read"].values()) == manifest(out)["rows"]


def test_several_gzip_members_and_a_truncated_one(tmp_path):
    items = [f"record {i}".encode() * (i + 1) for i in range(5)]
    framed = [
        struct.pack("<Q", len(r)) + struct.pack("<I", masked_crc(struct.pack("<Q", len(r))))
        + r + struct.pack("<I", masked_crc(r))
        for r in items
    ]  # fmt: skip
    path = tmp_path / "x.tfrecord.gz"
    members = gzip.compress(b"".join(framed[:2])) + gzip.compress(b"".join(framed[2:]))
    path.write_bytes(members)
    assert records(path, "gzip") == items
    path.write_bytes(members[:-7])
    frames = list(read_frames(str(path), "gzip"))
    got = [d for _, _, d, _ in frames[:-1]]
    assert got == items[: len(got)] and len(got) >= 2
    assert frames[-1][3].check == "compression" and "truncated" in frames[-1][3].message


# ----------------------------------------------------------------------------- shard faults


def test_flipped_byte_fails_the_record_crc(parquet_out, copy):
    out = copy(parquet_out)
    shard = shards(out)[0]
    frames = list(read_frames(str(shard), "none"))
    _, offset, data, _ = frames[3]
    raw = bytearray(shard.read_bytes())
    raw[offset + 12 + 5] ^= 0x01
    shard.write_bytes(bytes(raw))
    code, out_text, line = verify(out, "--source")
    assert code == EXIT_FAILED
    assert f"{shard}: record 3 (byte {offset}): the data's crc does not match" in out_text
    assert line["finding_counts"]["crc"] == 1 and line["finding_counts"]["counts"] == 1
    # With the source, the row of the spoilt record is named as missing.
    assert f"trips.parquet: row {record_id(data)}: no record of split train" in out_text


def test_flipped_byte_in_gzip_data(csv_out, copy):
    out = copy(csv_out)
    shard = shards(out)[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    shard.write_bytes(bytes(raw))
    code, text, line = verify(out)
    assert code == EXIT_FAILED and "does not decompress" in text and str(shard) in text
    assert line["finding_counts"]["compression"] == 1


def test_truncated_shard(csv_out, parquet_out, copy):
    out = copy(csv_out)
    shard = shards(out)[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    code, text, _ = verify(out)
    assert code == EXIT_FAILED
    assert f"{shard}: record" in text and "truncated" in text and "record(s) before it" in text
    out = copy(parquet_out)
    shard = shards(out, "eval")[0]
    shard.write_bytes(shard.read_bytes()[:-10])
    report = verify_output(str(out))
    (found,) = [f for f in report.findings.kept if f.check == "framing"]
    assert found.file == str(shard) and "truncated: the record needs" in found.message


def test_deleted_and_stale_shards(parquet_out, copy):
    out = copy(parquet_out)
    gone = shards(out, "eval")[1]
    gone.unlink()
    stale = out / "train-00002-of-00003.tfrecord"
    shutil.copy(shards(out)[0], stale)
    code, text, line = verify(out)
    assert code == EXIT_FAILED
    assert f"{gone}: listed in the manifest (split eval) but missing" in text
    assert f"{stale}: named like a shard but not in the manifest" in text
    assert line["finding_counts"] == {"files": 1, "stale": 1, "counts": 1}


# ----------------------------------------------------------------------------- record faults


def test_record_removed(parquet_out, copy):
    out = copy(parquet_out)
    shard = shards(out)[1]
    items = records(shard, "none")
    removed = items.pop(7)
    write_records(shard, items, "none")
    code, text, line = verify(out, "--source")
    assert code == EXIT_FAILED
    row = record_id(removed)
    assert (
        f"trips.parquet: row {row}: no record of split train equals the one this row gives" in text
    )
    assert f"split train: {manifest(out)['splits']['train']['rows'] - 1} intact record(s)" in text
    assert line["finding_counts"] == {"counts": 1, "missing": 1}


def test_record_duplicated(csv_out, copy):
    out = copy(csv_out)
    shard = shards(out)[0]
    items = records(shard, "gzip")
    write_records(shard, [*items, items[4]], "gzip")
    code, text, line = verify(out, "--source")
    assert code == EXIT_FAILED
    assert (
        f"{shard}: record {len(items)} (split train) is copy 2 of a record the source gives 1"
        in text
    )
    assert f"the first copy is {shard}: record 4" in text
    assert line["finding_counts"] == {"counts": 1, "duplicate": 1}


def test_record_in_another_split_and_an_extra_record(parquet_out, copy):
    out = copy(parquet_out)
    train, evals = shards(out)[0], shards(out, "eval")[0]
    moved, *rest = records(evals, "none")
    write_records(evals, rest, "none")
    write_records(train, [*records(train, "none"), moved], "none")
    report = verify_output(str(out), SourceRequest())
    (found,) = [f for f in report.findings.kept if f.check == "split"]
    assert found.row == record_id(moved) and found.file == str(train)
    assert "the row's split is eval" in found.message
    other = shards(out)[1]
    write_records(other, [*records(other, "none"), b"\x08\x01"], "none")  # not from any row
    report = verify_output(str(out), SourceRequest())
    extras = [f for f in report.findings.kept if f.check == "extra"]
    assert [(f.file, f.split) for f in extras] == [(str(other), "train")]
    assert "no source row gives this record" in extras[0].message


def test_source_value_changed_after_the_run(parquet_out, copy, tmp_path):
    table = _parquet_table()
    fare = table.column("fare").to_pylist()
    fare[8] = 99.5
    changed = tmp_path / "moved" / "trips.parquet"
    changed.parent.mkdir()
    pq.write_table(table.set_column(2, "fare", pa.array(fare)), changed)
    code, text, line = verify(parquet_out, "--source", changed)
    assert code == EXIT_FAILED
    assert f"{changed}: row 8 (split" in text
    assert "differ: column 'fare': source 99.5, record 7.5; column 'fare_z': source " in text
    report = verify_output(str(parquet_out), SourceRequest(inputs=(str(changed),)))
    (found,) = [f for f in report.findings.kept if f.check == "changed"]
    assert found.row == 8 and found.columns["fare"] == {"source": 99.5, "record": 7.5}
    assert line["finding_counts"] == {"changed": 1}


def test_csv_value_changed_is_paired_by_equal_columns(csv_out, work, tmp_path):
    text = (work / "trips.csv").read_text(encoding="utf-8").replace("\n12,name 12,", "\n12,nom,")
    changed = tmp_path / "trips.csv"
    changed.write_text(text, encoding="utf-8")
    report = verify_output(str(csv_out), SourceRequest(inputs=(str(changed),)))
    (found,) = report.findings.kept
    assert (found.check, found.source, found.row) == ("changed", str(changed), 12)
    assert found.columns == {"name": {"source": "nom", "record": "name 12"}}
    assert 'column \'name\': source "nom", record "name 12"' in format_report(report)


# ----------------------------------------------------------------------------- manifest faults


def test_manifest_count_edited(parquet_out, copy):
    out = copy(parquet_out)

    def change(m):
        m["splits"]["eval"]["rows"] += 1
        m["rows"] += 1

    edit_manifest(out, change)
    code, text, line = verify(out)
    assert code == EXIT_FAILED
    rows = manifest(out)["splits"]["eval"]["rows"]
    assert f"split eval: {rows - 1} intact record(s) in its files, the manifest says {rows}" in text
    assert line["finding_counts"] == {"counts": 1}


def test_manifest_features_that_records_do_not_match(parquet_out, copy):
    out = copy(parquet_out)

    def change(m):
        features = {f["name"]: f for f in m["features"]}
        features["tags"]["null_count"] = 5  # a null count the records do not have
        m["features"] = [f for f in m["features"] if f["name"] != "id"]  # unlisted feature

    edit_manifest(out, change)
    report = verify_output(str(out))
    assert dict(report.findings.counts) == {"features": 1, "nulls": 1}
    text = format_report(report)
    assert f"feature 'id' is in {manifest(out)['rows']} record(s) but not in the manifest" in text
    assert "feature 'tags' is absent from 0 record(s); the manifest's null_count is 5" in text


@pytest.mark.parametrize(
    ("feature", "change", "expected"),
    [
        ("n", {"kind": "float"}, "Key: n, Index: 0.  Data types don't match"),
        ("grid", {"shape": [3]}, "Key: grid, Index: 0.  Number of int64 values != expected"),
    ],
)
def test_records_that_do_not_parse_as_the_manifest_says(
    parquet_out, copy, feature, change, expected
):
    out = copy(parquet_out)

    def edit(m):
        (entry,) = [f for f in m["features"] if f["name"] == feature]
        entry.update(change)

    edit_manifest(out, edit)
    report = verify_output(str(out), limit=3)
    assert dict(report.findings.counts) == {"parse": manifest(out)["rows"]}  # each record
    first = report.findings.kept[0]
    assert first.message.startswith(f"{shards(out)[0]}: record 0: does not parse as the ")
    assert expected in first.message and "function_node" not in first.message


def test_a_record_without_a_non_nullable_feature(parquet_out, copy):
    import tensorflow as tf

    out = copy(parquet_out)
    shard = shards(out, "eval")[1]
    items = records(shard, "none")
    example = tf.train.Example.FromString(items[2])
    del example.features.feature["n"]
    items[2] = example.SerializeToString()
    write_records(shard, items, "none")
    report = verify_output(str(out))
    (parse, nulls) = report.findings.kept
    assert parse.message.startswith(f"{shard}: record 2: does not parse")
    assert "Feature: n (data type: int64) is required but could not be found" in parse.message
    assert nulls.message == (
        f"feature 'n' is absent from 1 record(s) (first: {shard}: record 2); the manifest's "
        "null_count is 0"
    )


def test_ragged_lengths_and_float64_bytes_against_the_shapes(tmp_path):
    import tensorflow as tf

    from pipeline.verify.records import RecordChecker
    from pipeline.verify.report import Findings
    from transforms.encode.schema import FeatureSpec

    def feature(name, kind, shape, encoding="values", nulls=0):
        spec = FeatureSpec(name, (name,), kind, "float64", shape, encoding, "x")
        return {**spec.to_json(), "null_count": nulls}

    def example(grid, exact):
        return tf.train.Example(
            features=tf.train.Features(
                feature={
                    "grid": tf.train.Feature(int64_list=tf.train.Int64List(value=grid)),
                    "exact": tf.train.Feature(bytes_list=tf.train.BytesList(value=[exact])),
                }
            )
        ).SerializeToString()

    features = [
        feature("grid", "int64", [2, 2], nulls=1),
        feature("exact", "bytes", [2], "float64_bytes"),
    ]
    findings = Findings()
    checker = RecordChecker([StoredFeature.from_json(f) for f in features], findings)
    good = example([1, 2, 3, 4], struct.pack("<2d", 0.5, 1.5))
    checker.check("f", [good, example([1, 2, 3], b"\0" * 12)], [0, 1])
    assert [f.message for f in findings.kept] == [
        "f: record 1: feature 'grid': 3 values, expected one of [0, 4] (shape (2, 2), "
        "encoding values)",
        "f: record 1: feature 'exact': a float64 value of 12 bytes, expected 16 (shape (2,), "
        "encoding float64_bytes)",
    ]


def test_error_files_against_the_manifest_and_the_source(csv_out, copy):
    out = copy(csv_out)
    (errors,) = sorted((out / "_errors").glob("*.jsonl"))
    lines = errors.read_text(encoding="utf-8").splitlines()
    errors.write_text(lines[0] + "\n", encoding="utf-8")
    dropped = json.loads(lines[1])
    report = verify_output(str(out), SourceRequest())
    messages = [f.message for f in report.findings.kept if f.check == "bad_rows"]
    assert any(
        "1 row(s) in the error files, the manifest's bad_rows.count is 2" in m for m in messages
    )
    assert any(
        m.startswith(f"{dropped['source']}: row {dropped['row']}: cannot be converted")
        and "did not set it aside" in m
        for m in messages
    )


# ----------------------------------------------------------------------------- sample, usage


def test_sample_is_seeded_and_still_reads_every_record(parquet_out, copy):
    select = sample_rows(0.25, seed=3)
    rows = np.arange(ROWS)
    chosen = select("/a/trips.parquet", rows)
    assert 30 < chosen.sum() < 90
    assert np.array_equal(chosen, select("/b/trips.parquet", rows))  # by file name, not dir
    assert np.array_equal(chosen[100:], select("trips.parquet", rows[100:]))
    out = copy(parquet_out)
    shard = shards(out)[0]
    items = records(shard, "none")
    victim = next(i for i, r in enumerate(items) if chosen[record_id(r)])
    row = record_id(items.pop(victim))
    write_records(shard, items, "none")
    code, text, line = verify(out, "--sample", "0.25", "--seed", "3")
    assert code == EXIT_FAILED
    assert f"trips.parquet: row {row}: no record of split train" in text
    assert line["records_read"]["train"] == manifest(out)["splits"]["train"]["rows"] - 1
    assert "sample 0.25 (seed 3)" in text
    code, text, _ = verify(parquet_out, "--sample", "40")
    assert code == EXIT_OK, text


def test_usage_errors(tmp_path, parquet_out, copy, work):
    code, text, line = verify(tmp_path)
    assert code == EXIT_USAGE and "no manifest" in text and line["status"] == "invalid"
    for flags in (["--sample", "0"], ["--sample", "1.5"], ["--runner=x"]):
        with pytest.raises(SystemExit) as exit_info:  # argparse's usage error
            run_cli_captured(["verify", parquet_out, *flags])
        assert exit_info.value.code == EXIT_USAGE
    out = copy(parquet_out)
    edit_manifest(out, lambda m: m.pop("config"))  # a manifest of an older writer
    code, text, _ = verify(out)
    assert code == EXIT_OK  # the records are still checked
    code, text, _ = verify(out, "--source")
    assert code == EXIT_USAGE and "has no config section" in text and "--config" in text
    code, text, _ = verify(out, "--config", work / "parquet.yaml")
    assert code == EXIT_OK, text
    code, text, _ = verify(out, "--config", work / "csv.yaml")
    assert code == EXIT_USAGE and "splits" in text
    edit_manifest(out, lambda m: m["splits"]["eval"].pop("files"))
    code, text, _ = verify(out)
    assert code == EXIT_USAGE and "key 'splits.eval' needs 'rows' and a list of 'files'" in text


# ----------------------------------------------------------------------------- key walk


@settings(max_examples=150, deadline=None)
@example(rows=[{"a": []}], noise=[(0, b"\x80\x80\x80\x80\x10\x00")])  # field number 2**29
@example(rows=[{"a": [1]}], noise=[(0, b"\x12" + b"\xff" * 9 + b"\x01")])  # length < 0
@example(rows=[{"a": [1]}], noise=[(0, b"\xf8" + b"\xff" * 8 + b"\x01\x00")])  # tag < 0
@given(
    rows=st.lists(
        st.dictionaries(
            st.sampled_from(["a", "b", "é", "", "a.b", "unlisted"]),
            st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1)), st.lists(st.binary())),
            max_size=5,
        ),
        max_size=6,
    ),
    noise=st.lists(st.tuples(st.integers(0, 5), st.binary(min_size=1, max_size=6)), max_size=3),
)
def test_feature_presence_agrees_with_protobuf(rows, noise):
    import tensorflow as tf

    from pipeline.verify.keys import feature_presence

    def feature(values):
        if values and isinstance(values[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    items = [
        tf.train.Example(
            features=tf.train.Features(feature={k: feature(v) for k, v in row.items()})
        ).SerializeToString()
        for row in rows
    ]
    for i, extra in noise:  # appended bytes: unknown fields, or not protobuf at all
        if items:
            items[i % len(items)] += extra
    names = ["a", "b", "é", ""]
    present, unknown = feature_presence(items, names)
    for i, data in enumerate(items):
        try:
            keys = set(tf.train.Example.FromString(data).features.feature)
        except DecodeError:  # not an Example: the parse reports it
            assert not present[i].any()
            continue
        assert {n for j, n in enumerate(names) if present[i, j]} == keys & set(names)
        assert {k for k, rs in unknown.items() if i in rs} == keys - set(names)
