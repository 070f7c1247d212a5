"""Maps and lists of structs (docs/types.md): a map column becomes two parallel variable-length
features, `NAME.key` and `NAME.value`; a list of structs one variable-length feature per
field, `NAME.field`; a struct holding either, the same under its path. Parquet -> convert on
both engines -> `load_dataset` and `iter_batches` -> the source's keys, values and fields, row
by row; the statistics, `verify --source` and the errors for what these features cannot hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import ragged_to_list, run_cli_captured
from test_reader_arrays import assert_readers_agree

from pipeline.output.manifest import read_manifest
from pipeline.reader import load_dataset
from transforms.encode.columns import leaf_array
from transforms.encode.schema import SchemaError, plan_features

ROWS = 200
POINT = pa.struct([("x", pa.int32()), ("tag", pa.string())])
INNER = pa.struct([("id", pa.int64()), ("attrs", pa.map_(pa.string(), pa.float32()))])


def make_source(n: int = ROWS, seed: int = 9) -> tuple[pa.Table, dict[str, list]]:
    """The table and, per feature, each row's expected values (a null row: an empty list)."""
    rng = np.random.default_rng(seed)
    maps, points, nested = [], [], []
    for i in range(n):
        k = int(rng.integers(0, 4))
        maps.append(None if i % 7 == 3 else [(f"k{j}", int(i * 10 + j)) for j in range(k)])
        points.append(
            None if i % 11 == 5 else [{"x": i + j, "tag": f"t{j}" * j} for j in range(k % 3)]
        )
        nested.append(
            None
            if i % 13 == 6
            else {"id": i, "attrs": None if i % 5 == 0 else [("w", i / 4)] * (i % 3)}
        )
    maps[0], maps[1] = [], [("", -(2**63)), ("ü", 2**63 - 1)]
    points[0] = []
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "m": pa.array(maps, pa.map_(pa.string(), pa.int64())),
            "pts": pa.array(points, pa.list_(POINT)),
            "big": pa.array(points, pa.large_list(POINT)),
            "st": pa.array(nested, INNER),
        }
    )

    def rows(values, pick):
        return [[] if v is None else [pick(e) for e in v] for v in values]

    attrs = [None if v is None else v["attrs"] for v in nested]
    expected = {
        "m.key": rows(maps, lambda e: e[0].encode()),
        "m.value": rows(maps, lambda e: e[1]),
        "pts.x": rows(points, lambda e: e["x"]),
        "pts.tag": rows(points, lambda e: e["tag"].encode()),
        "big.x": rows(points, lambda e: e["x"]),
        "big.tag": rows(points, lambda e: e["tag"].encode()),
        "st.attrs.key": rows(attrs, lambda e: e[0].encode()),
        "st.attrs.value": rows(attrs, lambda e: float(np.float32(e[1]))),
    }
    return table, expected


DTYPES = {"m.key": "string", "m.value": "int64", "pts.x": "int32", "pts.tag": "string"}
DTYPES |= {"big.x": "int32", "big.tag": "string", "st.attrs.key": "string"}
DTYPES |= {"st.attrs.value": "float32", "st.id": "int64", "id": "int64"}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, dict[str, list]]:
    table, expected = make_source()
    path = tmp_path_factory.mktemp("maps") / "nested.parquet"
    pq.write_table(table, path, row_group_size=64)
    return path, expected


@pytest.fixture(scope="module", params=["in-process", "beam"])
def output(request, source) -> Path:
    path, _ = source
    out = path.parent / f"out-{request.param}"
    args = ["convert", "--input", path, "--output", out, "--batch-rows", "50"]
    result = run_cli_captured([*args, "--engine", request.param, "--num-shards", "2"])
    assert result.code == 0, result.err
    assert json.loads(result.out.strip().splitlines()[-1])["engine"] == request.param
    return out


def test_manifest_features(output):
    features = {f.name: f.spec for f in read_manifest(str(output)).features}
    assert {name: spec.dtype for name, spec in features.items()} == DTYPES
    assert features["m.key"].path == ("m", "key") and features["m.key"].shape is None
    assert features["st.attrs.value"].path == ("st", "attrs", "value")
    assert features["pts.tag"].source_type == "list<item: string>"


def test_every_row_round_trips(output, source):
    _, expected = source
    got: dict[str, list] = {}
    for batch in load_dataset(str(output), batch_size=64):
        for name, value in batch.items():
            rows = (
                ragged_to_list(value)
                if isinstance(value, tf.RaggedTensor)
                else value.numpy().tolist()
            )
            got.setdefault(name, []).extend(rows)
    order = np.argsort(got["id"], kind="stable")
    for name, rows in expected.items():
        actual = [got[name][i] for i in order]
        assert actual == rows, name
    assert [got["st.id"][i] for i in order][:6] == [0, 1, 2, 3, 4, 5]


def test_iter_batches_equals_load_dataset(output):
    assert assert_readers_agree(output) == ROWS


def test_verify_with_source(output, source):
    path, _ = source
    result = run_cli_captured(["verify", output, "--source", path])
    assert result.code == 0, result.out + result.err


def test_statistics_count_the_values(output, source):
    _, expected = source
    from tensorflow_metadata.proto.v0 import statistics_pb2

    manifest = read_manifest(str(output))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (output / manifest.statistics["train"]).read_bytes()
    ).datasets[0]
    by_name = {f.path.step[0]: f for f in stats.features}
    common = by_name["m.value"].num_stats.common_stats
    assert common.tot_num_values == sum(len(r) for r in expected["m.value"])


def test_leaf_array_of_a_sliced_map_and_list_of_structs():
    table, expected = make_source(30)
    part = table.slice(7, 12)
    keys = leaf_array(part, ("m", "key"))
    assert keys.to_pylist()[0] == [b.decode() for b in expected["m.key"][7]]
    assert keys.null_count == part.column("m").null_count
    tags = leaf_array(part, ("big", "tag"))
    assert pa.types.is_large_list(tags.type)
    assert [r or [] for r in tags.to_pylist()] == [
        [t.decode() for t in row] for row in expected["big.tag"][7:19]
    ]


def test_options_on_a_map_or_a_null_in_a_map_are_named():
    schema = pa.schema([("m", pa.map_(pa.string(), pa.int64()))])
    with pytest.raises(SchemaError, match="'m': options apply to leaves"):
        from transforms.encode.features import ColumnOptions

        plan_features(schema, {"m": ColumnOptions(null_policy="fail")})
    from transforms.encode.columns import to_kernel_column
    from transforms.encode.features import ConversionError

    table = pa.table({"m": pa.array([[("a", 1)], [("b", None)]], schema.field("m").type)})
    (spec,) = [s for s in plan_features(table.schema) if s.name == "m.value"]
    with pytest.raises(ConversionError, match=r"t\.parquet: row 1: column 'm\.value'"):
        to_kernel_column(table, spec, "t.parquet", 0)


def test_report_schema_and_tfds_layout(output, source, tmp_path):
    """The report and schema.pbtxt name the new features; the tfds layout reads what
    load_dataset reads."""
    import tensorflow_datasets as tfds
    from test_layouts import _assert_same_row, _rows, _tfds_rows

    result = run_cli_captured(["report", output])
    assert result.code == 0, result.err
    page = (output / "report.html").read_text(encoding="utf-8")
    assert "m.key" in page and "st.attrs.value" in page
    schema = (output / read_manifest(str(output)).schema).read_text(encoding="utf-8")
    assert 'name: "m.value"' in schema
    path, _ = source
    out = tmp_path / "tfds"
    args = ["convert", "--input", path, "--output", out, "--layout", "tfds"]
    assert run_cli_captured(args).code == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    got = _tfds_rows(tfds.builder_from_directory(str(out)), "train")
    want = _rows(out, "train")
    assert len(got) == len(want) == ROWS
    for a, b in zip(got, want, strict=True):
        _assert_same_row(a, b, manifest)
