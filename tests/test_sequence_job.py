"""SequenceExample outputs end to end: the CLI with a `sequence:` section, rows of a sequence
spread over files, read back through `load_dataset` and compared with the source rows, nulls
and zeros included; the context check's bad rows; splits; a list<struct> column; the peer data
grouped per company."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import read_manifest, run_cli_captured

from pipeline.reader import feature_spec, load_dataset
from pipeline.reader.sequence import LENGTH_KEY
from pipeline.verify.inspect import inspect_path


def write_config(path, extra: str = "", **sequence) -> str:
    lines = [extra, "sequence:"]
    for key, value in sequence.items():
        lines.append(f"  {key}: {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def convert(tmp_path, inputs, name: str, config: str, *extra: str):
    out = tmp_path / name
    result = run_cli_captured(
        ["convert", "--config", config, "--input", inputs, "--output", out, *extra]
    )
    return out, result


def one_batch(out, **kwargs) -> dict:
    batches = list(load_dataset(str(out), batch_size=100_000, **kwargs))
    assert len(batches) == 1
    return batches[0]


def grouped_source(table: pa.Table, key: str, order: str) -> dict:
    """key value -> the source rows of its sequence (dicts), ordered by `order` (nulls last),
    ties in the table's order."""
    rows = table.to_pylist()
    index = sorted(
        range(len(rows)),
        key=lambda i: (rows[i][order] is None, rows[i][order] or 0, i),
    )
    groups: dict = {}
    for i in index:
        groups.setdefault(rows[i][key], []).append(rows[i])
    return groups


def by_key(batch: dict, key: str) -> dict:
    """key value -> index of its record in the batch (None for a null key)."""
    keys = batch[key].numpy().tolist()
    present = batch.get(f"{key}__present")
    present = [True] * len(keys) if present is None else present.numpy().tolist()
    return {(k.decode() if isinstance(k, bytes) else k) if p else None: i
            for i, (k, p) in enumerate(zip(keys, present, strict=True))}  # fmt: skip


def f32(value):
    return None if value is None else float(np.float32(value))


PART = pa.schema(
    [
        ("user", pa.string()),
        ("country", pa.string()),
        ("ts", pa.int64()),
        ("click", pa.int8()),
        ("price", pa.float64()),
        ("tags", pa.list_(pa.int64())),
        ("grid", pa.list_(pa.float32())),  # shape [2] in the config
    ]
)
PART0 = pa.table(
    {
        "user": ["u1", "u2", "u1", "u3", "u2"],
        "country": ["fr", None, "fr", "de", None],
        "ts": [5, 1, 3, 7, 1],
        "click": [1, 0, None, 0, 1],
        "price": [0.0, None, 2.5, -1.25, 3.0],
        "tags": [[1], [], None, [2, 3], [4]],
        "grid": [[0.0, 1.0], [2.0, 3.0], None, [4.0, 5.0], [6.0, 7.0]],
    },
    schema=PART,
)
PART1 = pa.table(
    {
        "user": ["u3", "u1", "u2"],
        "country": ["de", "fr", None],
        "ts": [7, 4, 0],
        "click": [None, 1, 0],
        "price": [9.5, None, 0.0],
        "tags": [[], [5, 6, 7], [8]],
        "grid": [[8.0, 9.0], [10.0, 11.0], [12.0, 13.0]],
    },
    schema=PART,
)


MANY = 200  # users of part-2: three steps each, given as ts 2, 0, 1
PART2 = pa.table(
    {
        "user": [f"user{i:03d}" for i in range(MANY) for _ in range(3)],
        "country": [None if i % 5 == 0 else "x" for i in range(MANY) for _ in range(3)],
        "ts": [t for _ in range(MANY) for t in (2, 0, 1)],
        "click": [None if j == 1 else (i + j) % 3 for i in range(MANY) for j in range(3)],
        "price": [i + 0.1 if j else None for i in range(MANY) for j in range(3)],
        "tags": [[i] * j for i in range(MANY) for j in range(3)],
        "grid": [[float(i), float(j)] for i in range(MANY) for j in range(3)],
    },
    schema=PART,
)
SOURCE = pa.concat_tables([PART0, PART1, PART2])  # files in path order: ties keep that order


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    directory = tmp_path_factory.mktemp("events")
    for i, part in enumerate((PART0, PART1, PART2)):
        pq.write_table(part, directory / f"part-{i}.parquet")
    return directory


@pytest.fixture(scope="module")
def grouped_out(events, tmp_path_factory):
    work = tmp_path_factory.mktemp("grouped")
    config = write_config(
        work / "seq.yaml",
        "columns: {grid: {shape: [2]}, price: {keep_float64: true}}\n"
        "splits: {train: 3, eval: 1}\nnum_shards: 2",
        group_by="user",
        order_by="ts",
        context=["country"],
    )
    out, result = convert(work, events / "*.parquet", "out", config)
    assert result.code == 0, result.err
    return out


def as_lists(batch: dict) -> dict:
    """Every tensor of a batch as Python lists (one conversion each)."""
    return {
        k: v.to_list() if isinstance(v, tf.RaggedTensor) else v.numpy().tolist()
        for k, v in batch.items()
    }


def test_grouped_rows_from_three_files_read_back_equal(grouped_out):
    groups = grouped_source(SOURCE, "user", "ts")
    batches = {split: one_batch(grouped_out, split=split) for split in ("train", "eval")}
    for batch in batches.values():
        assert batch["click"].dtype == tf.int8 and batch["price"].dtype == tf.float64
        assert batch["grid"].shape.as_list()[1:] == [None, 2]
    records = {}  # user -> its record, as Python lists
    for batch in batches.values():
        values = as_lists(batch)
        for user, i in by_key(batch, "user").items():
            assert user not in records  # every sequence once, whole, in one split
            records[user] = {k: v[i] for k, v in values.items()}
    assert sorted(records) == sorted(groups)
    assert 20 < len(by_key(batches["eval"], "user")) < 80
    for user, rows in groups.items():
        got = records[user]
        assert got[LENGTH_KEY] == len(rows)
        assert got["ts"] == [r["ts"] for r in rows]
        assert got["click"] == [r["click"] or 0 for r in rows]
        assert got["click__present"] == [r["click"] is not None for r in rows]
        assert got["price"] == [r["price"] or 0.0 for r in rows]  # keep_float64: exact
        assert got["price__present"] == [r["price"] is not None for r in rows]
        assert got["tags"] == [r["tags"] or [] for r in rows]
        assert got["grid"] == [r["grid"] or [0.0, 0.0] for r in rows]
        assert got["grid__present"] == [r["grid"] is not None for r in rows]
        country = rows[0]["country"]
        assert got["country__present"] == (country is not None)
        assert got["country"] == (country or "").encode()
    # u2's steps at ts 0 (file 1), 1 (file 0, row 1), 1 (file 0, row 4): the tie in file order
    assert records["u2"]["click"] == [0, 0, 1]


def test_manifest_and_feature_spec_of_a_sequence_output(grouped_out):
    manifest = read_manifest(grouped_out)
    assert manifest["rows"] == 3 + MANY
    assert sum(s["rows"] for s in manifest["splits"].values()) == 3 + MANY
    assert [len(s["files"]) for s in manifest["splits"].values()] == [2, 2]
    assert [f["name"] for f in manifest["features"]] == ["country", "user"]
    section = manifest["sequence"]
    assert section["group_by"] == ["user"] and section["order_by"] == "ts"
    assert section["steps"] == SOURCE.num_rows
    nulls = {f["name"]: f["null_count"] for f in section["features"]}
    assert nulls == {
        n: SOURCE.column(n).null_count for n in ("click", "grid", "price", "tags", "ts")
    }
    assert {f["name"]: f["null_count"] for f in manifest["features"]}["country"] == 1 + MANY // 5
    context, lists = feature_spec(str(grouped_out))
    assert set(context) == {"country", "user"}
    assert set(lists) == {"click", "grid", "price", "tags", "ts"}
    assert all(isinstance(s, tf.io.RaggedFeature) for s in lists.values())


def test_context_that_differs_goes_to_errors(events, tmp_path):
    derive = 'transforms: [{derive: {name: ts2, expr: "ts * 2"}}]'  # rows preprocessed first
    config = write_config(tmp_path / "seq.yaml", derive, group_by="user", context=["country", "ts"])
    out, result = convert(
        tmp_path, events / "part-[01].parquet", "lenient", config, "--max-bad-rows", "6"
    )
    assert result.code == 0, result.err
    lines = [
        json.loads(line)
        for path in sorted((out / "_errors").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    # u3's two rows agree (ts 7 and 7): the only sequence kept
    assert sorted((r["source"].rsplit("/", 1)[-1], r["row"]) for r in lines) == [
        ("part-0.parquet", 0), ("part-0.parquet", 1), ("part-0.parquet", 2),
        ("part-0.parquet", 4), ("part-1.parquet", 1), ("part-1.parquet", 2),
    ]  # fmt: skip
    assert {r["column"] for r in lines} == {"ts"} and {r["stage"] for r in lines} == {"sequence"}
    assert all("a context column differs within the sequence" in r["reason"] for r in lines)
    batch = one_batch(out)
    assert batch["user"].numpy().tolist() == [b"u3"]
    assert batch["ts2"].to_list() == [[14, 14]] and batch["ts"].numpy().tolist() == [7]
    assert read_manifest(out)["bad_rows"]["count"] == 6
    summary = json.loads(result.out.strip().splitlines()[-1])
    assert (summary["rows_in"], summary["rows_out"], summary["bad"]) == (8, 1, 6)


def test_list_of_struct_column_read_back(tmp_path):
    events = pa.array(
        [
            [{"kind": "view", "ms": 10}, {"kind": None, "ms": 0}],
            [],
            None,
            [None, {"kind": "buy", "ms": None}],
        ],
        pa.list_(pa.struct([("kind", pa.string()), ("ms", pa.int32())])),
    )
    table = pa.table({"session": ["s1", "s2", "s3", "s4"], "events": events})
    pq.write_table(table, tmp_path / "sessions.parquet")
    config = write_config(tmp_path / "seq.yaml", column="events")
    out, result = convert(tmp_path, tmp_path / "sessions.parquet", "out", config)
    assert result.code == 0, result.err
    batch = one_batch(out)
    assert batch["session"].numpy().tolist() == [b"s1", b"s2", b"s3", b"s4"]
    assert batch[LENGTH_KEY].numpy().tolist() == [2, 0, 0, 2]
    assert batch["events.kind"].to_list() == [[b"view", b""], [], [], [b"", b"buy"]]
    assert batch["events.kind__present"].to_list() == [[True, False], [], [], [False, True]]
    assert batch["events.ms"].to_list() == [[10, 0], [], [], [0, 0]]
    assert batch["events.ms__present"].to_list() == [[True, True], [], [], [False, False]]
    assert batch["events.ms"].dtype == tf.int32
    section = read_manifest(out)["sequence"]
    assert section["column"] == "events" and section["null_lists"] == 1 and section["steps"] == 4
    report = inspect_path(str(out), limit=4)
    assert report["manifest"]["sequence"]["column"] == "events"
    assert set(report["manifest"]["feature_lists"]) == {"events.kind", "events.ms"}
    first, _, null_list, last = report["records"]
    assert first == {
        "context": {"session": ["s1"]},
        "feature_lists": {"events.kind": [["view"], None], "events.ms": [[10], [0]]},
    }
    assert null_list["feature_lists"] == {}  # a null list: no feature list at all
    assert last["feature_lists"]["events.ms"] == [None, None]


# ----------------------------------------------------------------------------- peer data


def test_peer_data_per_company_ordered_by_trip_start(peer_data, tmp_path):
    config = write_config(
        tmp_path / "seq.yaml", group_by="company", order_by="trip_start_timestamp"
    )
    out, result = convert(tmp_path, peer_data / "data.parquet", "taxi", config)
    assert result.code == 0, result.err
    source = pq.read_table(peer_data / "data.parquet")
    groups = grouped_source(source, "company", "trip_start_timestamp")
    batch = one_batch(out)
    index = by_key(batch, "company")
    assert set(index) == set(groups)
    assert int(tf.reduce_sum(batch[LENGTH_KEY])) == source.num_rows == 10_000
    steps = [f["name"] for f in read_manifest(out)["sequence"]["features"]]
    assert len(steps) == 17
    checked_nulls = 0
    for name in steps:
        kind = source.schema.field(name).type
        got_all = batch[name].to_list()  # one conversion per feature, then Python lists
        mask = batch.get(f"{name}__present")
        present_all = None if mask is None else mask.to_list()
        for company, rows in groups.items():
            i = index[company]
            values = [r[name] for r in rows]
            if pa.types.is_string(kind):
                want = [(v or "").encode() for v in values]
            elif pa.types.is_floating(kind):
                want = [f32(v) or 0.0 for v in values]
            else:
                want = [v or 0 for v in values]
            assert got_all[i] == want, (company, name)
            if present_all is None:
                assert None not in values, (company, name)
            else:
                assert present_all[i] == [v is not None for v in values], (company, name)
                checked_nulls += present_all[i].count(False)
    assert checked_nulls > 10_000  # the empty column alone has 10,000
    # ties of the trip start (15-minute steps) keep the file's row order: checked above
