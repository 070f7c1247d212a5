"""Lists ragged at every level (docs/types.md): a list column whose shape has a -1 below its
first dim is written as its values plus, per such level K, a row-lengths feature
`NAME__row_lengths_K`; both readers restore it as the nested ragged value of the source.

Parquet -> convert (in-process with 1 and 2 workers, and Beam) -> `load_dataset` and
`iter_batches` -> equal to the source row by row (a null row an empty one); verify with the
source, verify of records whose lengths do not add up, the statistics and schema.pbtxt of
the row-lengths features, the index's random access, and the errors for what such a column
cannot do.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
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
from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import read_record
from transforms.encode.features import ColumnOptions, row_lengths_key
from transforms.encode.schema import SchemaError, plan_features
from transforms.write.tfrecord import read_records

ROWS = 300
CONFIG = "columns:\n  mixed: {shape: [-1, -1, 3]}\n  mid: {shape: [-1, 2, -1]}\n"


def _nested(rng: np.random.Generator, depth: int, leaf, top: int = 4) -> list:
    if depth == 0:
        return leaf(rng)
    return [_nested(rng, depth - 1, leaf) for _ in range(int(rng.integers(0, top)))]


def make_source(n: int = ROWS, seed: int = 23) -> tuple[pa.Table, dict[str, list]]:
    """The table and, per column, each row's expected value as nested lists (null: [])."""
    rng = np.random.default_rng(seed)
    ints = lambda r: int(r.choice([0, -1, 7, 2**63 - 1, -(2**63), int(r.integers(-9, 9))]))  # noqa: E731
    deep = [None if i % 13 == 4 else _nested(rng, 3, ints) for i in range(n)]
    deep[0], deep[1], deep[2] = [], [[]], [[[]], [[0]], []]
    grid = [_nested(rng, 2, lambda r: float(np.float32(r.normal()))) for _ in range(n)]
    words = [[[f"w{i}", ""] for _ in range(i % 3)] for i in range(n)]  # inner fixed: [-1, 2]
    mixed = [[[[j, j, -j]] * (j % 3) for j in range(i % 4)] for i in range(n)]
    mid = [None if i % 9 == 1 else [[[i] * (i % 3), [-i]] for _ in range(i % 3)] for i in range(n)]
    big = [_nested(rng, 2, lambda r: f"s{int(r.integers(0, 99))}") for _ in range(n)]
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "deep": pa.array(deep, pa.list_(pa.list_(pa.list_(pa.int64())))),
            "grid": pa.array(grid, pa.list_(pa.list_(pa.float32()))),
            "words": pa.array(words, pa.list_(pa.list_(pa.string()))),
            "mixed": pa.array(mixed, pa.list_(pa.list_(pa.list_(pa.int32())))),
            "mid": pa.array(mid, pa.list_(pa.list_(pa.list_(pa.int16())))),
            "big": pa.array(big, pa.large_list(pa.list_(pa.large_string()))),
        }
    )

    def encoded(rows, f=lambda v: v):
        def walk(v):
            return [walk(x) for x in v] if isinstance(v, list) else f(v)

        return [[] if r is None else walk(r) for r in rows]

    expected = {
        "deep": encoded(deep),
        "grid": encoded(grid),
        "words": encoded(words, str.encode),
        "mixed": encoded(mixed),
        "mid": encoded(mid),
        "big": encoded(big, str.encode),
    }
    return table, expected


SHAPES = {
    "deep": [-1, -1, -1],
    "grid": [-1, -1],
    "words": [-1, 2],
    "mixed": [-1, -1, 3],
    "mid": [-1, 2, -1],
    "big": [-1, -1],
}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path, dict[str, list]]:
    table, expected = make_source()
    directory = tmp_path_factory.mktemp("ragged")
    path = directory / "ragged.parquet"
    pq.write_table(table, path, row_group_size=64)
    config = directory / "job.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    return path, config, expected


def convert(source, out: Path, *args) -> Path:
    path, config, _ = source
    argv = ["convert", "--input", path, "--output", out, "--config", config, *args]
    result = run_cli_captured([*argv, "--batch-rows", "50"])
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module", params=["in-process", "beam"])
def output(request, source) -> Path:
    path, _, _ = source
    return convert(source, path.parent / f"out-{request.param}", "--engine", request.param)


def records(out: Path) -> collections.Counter:
    manifest = read_manifest(str(out))
    files = [out / f for split in manifest.splits.values() for f in split.files]
    return collections.Counter(r for f in files for r in read_records(str(f), 1 << 40))


def test_shapes_and_features(output):
    features = {f.name: f.spec for f in read_manifest(str(output)).features}
    assert {name: list(features[name].shape) for name in SHAPES} == SHAPES
    assert features["deep"].feature_keys == ("deep", "deep__row_lengths_1", "deep__row_lengths_2")
    assert features["mid"].feature_keys == ("mid", "mid__row_lengths_2")
    assert features["words"].feature_keys == ("words",)  # a fixed inner dim: no row lengths
    first = tf.train.Example.FromString(next(iter(records(output))))
    keys = set(first.features.feature)
    assert {"deep__row_lengths_1", "mixed__row_lengths_1", "big__row_lengths_1"} <= keys


def test_every_row_round_trips_through_load_dataset(output, source):
    _, _, expected = source
    got: dict[str, list] = collections.defaultdict(list)
    for batch in load_dataset(str(output), batch_size=64):
        for name in ("id", *SHAPES):
            value = batch[name]
            got[name] += (
                ragged_to_list(value)
                if isinstance(value, tf.RaggedTensor)
                else value.numpy().tolist()
            )
        assert isinstance(batch["deep"], tf.RaggedTensor) and batch["deep"].ragged_rank == 3
        assert batch["mixed"].shape.as_list()[-1] == 3  # the fixed inner dim stays dense
    order = np.argsort(got["id"], kind="stable")
    for name in SHAPES:
        assert [got[name][i] for i in order] == expected[name], name


def test_iter_batches_equals_load_dataset(output, source):
    assert assert_readers_agree(output) == ROWS
    _, _, expected = source
    rows = collections.defaultdict(list)
    for batch in iter_batches(str(output), batch_size=77):
        rows["id"] += batch["id"].tolist()
        for name in SHAPES:
            assert isinstance(batch[name], Ragged)
            rows[name] += batch[name].tolist()
    order = np.argsort(rows["id"], kind="stable")
    for name in SHAPES:
        assert [rows[name][i] for i in order] == expected[name], name


def test_engines_and_worker_counts_write_the_same_records(source, output, tmp_path):
    one = convert(source, tmp_path / "one", "--engine", "in-process", "--workers", "1")
    two = convert(source, tmp_path / "two", "--engine", "in-process", "--workers", "2")
    digest = lambda out: {  # noqa: E731
        f: hashlib.sha256((out / f).read_bytes()).hexdigest()
        for f in read_manifest(str(out)).splits["train"].files
    }
    assert digest(one) == digest(two)
    assert records(output) == records(one)


def test_verify_with_the_source(output, source):
    path, _, _ = source
    result = run_cli_captured(["verify", output, "--source", path])
    assert result.code == 0, result.out + result.err


def test_statistics_and_schema_know_the_row_lengths(output, source):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    _, _, expected = source
    manifest = read_manifest(str(output))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (output / manifest.statistics["train"]).read_bytes()
    ).datasets[0]
    by_name = {f.path.step[0]: f.num_stats.common_stats for f in stats.features}
    deep = expected["deep"]
    level1 = [inner for row in deep for inner in row]
    assert by_name["deep"].tot_num_values == sum(len(c) for b in level1 for c in b)
    assert by_name["deep__row_lengths_1"].tot_num_values == len(level1)
    assert by_name["deep__row_lengths_2"].tot_num_values == sum(len(b) for b in level1)
    assert by_name["deep__row_lengths_1"].num_missing == sum(
        r is None for r in make_source()[0]["deep"].to_pylist()
    )
    schema = text_format.Parse(
        (output / manifest.schema).read_text(encoding="utf-8"), schema_pb2.Schema()
    )
    names = [f.name for f in schema.feature]
    assert names.index("deep__row_lengths_1") == names.index("deep") + 1
    ragged = schema.tensor_representation_group[""].tensor_representation
    assert [p.row_length for p in ragged["deep"].ragged_tensor.partition] == [
        "deep__row_lengths_1",
        "deep__row_lengths_2",
    ]
    mid = [p.WhichOneof("kind") for p in ragged["mid"].ragged_tensor.partition]
    assert mid == ["uniform_row_length", "row_length"]
    assert "words" not in ragged


def test_verify_finds_row_lengths_that_do_not_add_up(source, tmp_path):
    """A record whose row lengths claim more values than it holds: tf.io.parse_example builds
    its ragged value without a word, verify names the record and the lengths."""
    out = convert(source, tmp_path / "out", "--compression", "none")
    shard = out / read_manifest(str(out)).splits["train"].files[0]
    originals = list(read_records(str(shard), 1 << 40))
    example = tf.train.Example.FromString(originals[5])
    lengths = example.features.feature["deep__row_lengths_2"].int64_list.value
    if not lengths:
        lengths.append(0)
    lengths[0] += 1
    tampered = [*originals[:5], example.SerializeToString(), *originals[6:]]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in tampered:
            writer.write(record)
    result = run_cli_captured(["verify", out])
    assert result.code == 1
    assert "record 5: feature 'deep': its row lengths 'deep__row_lengths_2' add up to" in (
        result.out
    ), result.out


def test_random_access_by_index(source, tmp_path):
    _, _, expected = source
    out = convert(source, tmp_path / "out", "--index", "--compression", "none")
    ids = []
    for i in (0, 1, 2, 4, 17, ROWS - 1):
        row = read_record(str(out), "train", i)
        ids.append(int(row["id"]))
        assert row["deep"].tolist() == expected["deep"][int(row["id"])]
        assert row["mid"].tolist() == expected["mid"][int(row["id"])]
    assert len(set(ids)) == 6


def test_a_row_of_another_shape_is_a_bad_row(tmp_path):
    path = tmp_path / "t.parquet"
    values = [[[1, 2], [3, 4]], [[5], [6, 7]], [[8, 9]]]
    pq.write_table(pa.table({"v": pa.array(values, pa.list_(pa.list_(pa.int64())))}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns: {v: {shape: [-1, 2]}}\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["convert", "--input", path, "--output", out, "--config", config]
    result = run_cli_captured([*args, "--max-bad-rows", "1"])
    assert result.code == 0, result.err
    (error,) = [json.loads(line) for f in (out / "_errors").glob("*.jsonl") for line in f.open()]
    assert error["row"] == 1 and "-1 where lengths vary" in error["reason"]
    assert [r.tolist() for r in read_record_rows(out)] == [[[1, 2], [3, 4]], [[8, 9]]]


def read_record_rows(out: Path) -> list:
    return [row for b in iter_batches(str(out), batch_size=8) for row in b["v"].rows()]


def test_what_such_a_column_cannot_do():
    schema = pa.schema([("v", pa.list_(pa.list_(pa.float64())))])
    with pytest.raises(SchemaError, match=r"keep_float64.*varies below its first dim"):
        plan_features(schema, {"v": ColumnOptions(keep_float64=True, shape=(-1, -1))})
    clash = pa.schema([("v", pa.list_(pa.list_(pa.int64()))), ("v__row_lengths_1", pa.int64())])
    with pytest.raises(SchemaError, match=r"v__row_lengths_1.*occur twice"):
        plan_features(clash, {"v": ColumnOptions(shape=(-1, -1))})
    with pytest.raises(SchemaError, match="a dim is a size or -1"):
        plan_features(schema, {"v": ColumnOptions(shape=(-1, -2))})
    for zero in ((-1, 0), (2, 0), (0, 3)):  # the readers could not tell [[], []] from []
        with pytest.raises(SchemaError, match=r"a dim of 0 holds no values.*use -1"):
            plan_features(schema, {"v": ColumnOptions(shape=zero)})
    one = pa.schema([("v", pa.list_(pa.int64()))])
    with pytest.raises(SchemaError, match=r"shape \[0\]: a dim of 0 holds no values"):
        plan_features(one, {"v": ColumnOptions(shape=(0,))})
    assert row_lengths_key("v", 2) == "v__row_lengths_2"


def _nest(values: np.ndarray, shape: list[int], row: dict, name: str) -> list:
    """A row's nested list from what TFDS gives: the values flat (but for the fixed dims after
    the last varying one) and each varying level's row lengths."""
    last = max(k for k, d in enumerate(shape) if d < 0)
    level = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    for k in range(last, 0, -1):
        lengths = row[row_lengths_key(name, k)].tolist() if shape[k] < 0 else None
        if lengths is None:
            lengths = [shape[k]] * (len(level) // shape[k])
        ends = np.cumsum([0, *lengths]).tolist()
        assert ends[-1] == len(level), (name, k)
        level = [level[a:b] for a, b in itertools.pairwise(ends)]
    return level


def test_the_tfds_layout_declares_values_and_row_lengths(source, tmp_path):
    """TFDS reads such a column as its records hold it (flat values, each level's row
    lengths, declared in features.json); nesting them again gives every source row."""
    import tensorflow_datasets as tfds
    from test_layouts import _tfds_rows

    expected = source[2]
    out = convert(source, tmp_path / "tfds", "--layout", "tfds")
    declared = json.loads((out / "features.json").read_text(encoding="utf-8"))
    tensors = {k: v["tensor"] for k, v in declared["featuresDict"]["features"].items()}
    assert tensors["deep"]["shape"]["dimensions"] == ["-1"]
    assert tensors["mixed"]["shape"]["dimensions"] == ["-1", "3"]
    assert tensors["words"]["shape"]["dimensions"] == ["-1", "2"]  # not ragged below level 0
    assert tensors["mid__row_lengths_2"]["dtype"] == "int64"
    assert "mid__row_lengths_1" not in tensors
    rows = sorted(_tfds_rows(tfds.builder_from_directory(str(out)), "train"),
                  key=lambda r: int(r["id"]))  # fmt: skip
    assert len(rows) == ROWS
    for name, shape in SHAPES.items():
        for i, row in enumerate(rows):
            if any(d < 0 for d in shape[1:]):
                got = _nest(row[name], shape, row, name)
            else:
                got = row[name].tolist()
            assert got == expected[name][i], (name, i)


def test_sequences_refuse_such_a_column():
    from transforms.sequence.layout import SequenceOptions, plan_sequence

    schema = pa.schema([("user", pa.int64()), ("v", pa.list_(pa.list_(pa.int64())))])
    options = SequenceOptions(group_by=("user",))
    with pytest.raises(SchemaError, match="'v': a list ragged below its first level"):
        plan_sequence(options, schema, {"v": ColumnOptions(shape=(-1, -1))})


def test_the_report_shows_the_row_lengths(output):
    result = run_cli_captured(["report", output])
    assert result.code == 0, result.err
    page = (output / "report.html").read_text(encoding="utf-8")
    assert "deep__row_lengths_2" in page and "features the manifest does not list" not in page


def test_verify_finds_a_fixed_first_dim_that_does_not_hold(tmp_path):
    """Shape [2, -1]: a record whose row lengths list 3 inner lists (the values still add up)
    is named by verify; null rows, which have no feature, are not."""
    path = tmp_path / "t.parquet"
    values = [[[1], [2, 3]], None, [[], [4]], [[5, 6], []]]
    pq.write_table(pa.table({"v": pa.array(values, pa.list_(pa.list_(pa.int64())))}), path)
    config = tmp_path / "job.yaml"
    config.write_text("columns: {v: {shape: [2, -1]}}\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["--input", path, "--output", out, "--config", config, "--compression", "none"]
    assert run_cli_captured(["convert", *args]).code == 0
    assert run_cli_captured(["verify", out]).code == 0
    shard = out / read_manifest(str(out)).splits["train"].files[0]
    originals = list(read_records(str(shard), 1 << 40))
    example = tf.train.Example.FromString(originals[2])
    example.features.feature["v__row_lengths_1"].int64_list.value.append(0)
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in [*originals[:2], example.SerializeToString(), *originals[3:]]:
            writer.write(record)
    result = run_cli_captured(["verify", out])
    assert result.code == 1
    assert "record 2: feature 'v': 3 elements where dim 0 is 2" in result.out, result.out
    assert "record 1:" not in result.out
