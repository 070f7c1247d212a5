"""Nulls inside lists (docs/types.md, "Nulls and zeros"): a null element, a null inner list at
any level, a null map value, a null element or field of a list of structs is written (its value
as the type's zero or an empty list, its position under `NAME__nulls_K`) and restored with the
masks `NAME__present_K`; a null list reads apart from an empty one (`NAME__present`).

A seeded table with nulls at every level (lists of one to four levels, ragged at each, fixed
dims, maps of scalars and of lists, lists of structs of scalars and of lists) -> convert
(in-process with 1 and 2 workers, and Beam; and from JSON Lines) -> `load_dataset`,
`iter_batches` and `read_record` -> every value and every null position equal to the source's
`to_pylist()`; verify with the source; verify of a record whose null position lies beyond its
row's items; statistics, schema.pbtxt, inspect; tables without nulls inside
lists keep their bytes; a name that clashes with a null-positions feature is refused.
"""

from __future__ import annotations

import collections
import hashlib
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
from transforms.encode.records import encode_table
from transforms.encode.schema import SchemaError, plan_features
from transforms.write.tfrecord import read_records

ROWS = 400
CONFIG = (
    "columns:\n"
    "  grid: {shape: [-1, -1]}\n"
    "  deep: {shape: [-1, -1, -1]}\n"
    "  d4: {shape: [-1, -1, -1, -1]}\n"
    "  pairs: {shape: [-1, 2]}\n"
    "  vec: {shape: [2]}\n"
)
# leaf -> (shape as the manifest gives it, the zero a null value is written as)
LEAVES = {
    "li": (None, 0),
    "grid": ((-1, -1), 0.0),
    "deep": ((-1, -1, -1), 0),
    "words": (None, b""),
    "pairs": ((-1, 2), 0),
    "vec": ((2,), 0),
    "m.key": (None, b""),
    "m.value": (None, 0),
    "p.x": (None, 0),
    "p.s": (None, b""),
    "d4": ((-1, -1, -1, -1), 0),
    "ml.key": (None, b""),
    "ml.value": ((-1, -1), 0),
    "ls.v": ((-1, -1), 0),
    "ls.w": (None, b""),
}


def _maybe(rng: np.random.Generator, p: float, make):
    return None if rng.random() < p else make()


def _lists(rng, depth: int, leaf, p_null: float, top: int = 4) -> list:
    """A list of `depth` levels, each item null with probability `p_null`."""
    if depth == 1:
        return [_maybe(rng, p_null, lambda: leaf(rng)) for _ in range(int(rng.integers(0, top)))]
    return [
        _maybe(rng, p_null, lambda: _lists(rng, depth - 1, leaf, p_null, top))
        for _ in range(int(rng.integers(0, top)))
    ]


def make_table(n: int = ROWS, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = lambda r: int(r.choice([0, -1, 5, 2**63 - 1, int(r.integers(-99, 99))]))  # noqa: E731
    floats = lambda r: float(np.float32(r.normal()))  # noqa: E731
    word = lambda r: str(r.choice(["", "a", "ünï", "zz"]))  # noqa: E731

    def column(make, p_row: float = 0.1):
        rows = [_maybe(rng, p_row, make) for _ in range(n)]
        rows[0], rows[1] = None, []  # a null row and an empty list in every column
        return rows

    li = column(lambda: _lists(rng, 1, ints, 0.2, top=6))
    li[2] = [None]
    grid = column(lambda: _lists(rng, 2, floats, 0.2))
    grid[2], grid[3] = [None], [[], [None], None]
    deep = column(lambda: _lists(rng, 3, ints, 0.15))
    deep[2], deep[3] = [[None, [None]], None], [[[]], [[0, None]]]
    words = column(lambda: _lists(rng, 1, word, 0.2))
    small = lambda r: int(r.integers(-99, 99))  # noqa: E731
    pairs = column(
        lambda: [
            _maybe(rng, 0.2, lambda: [_maybe(rng, 0.2, lambda: small(rng)), 7])
            for _ in range(int(rng.integers(0, 3)))
        ]
    )
    vec = [_maybe(rng, 0.1, lambda: [_maybe(rng, 0.3, lambda: small(rng)), 1]) for _ in range(n)]
    vec[0], vec[1] = None, [None, None]

    def entries():
        return [(f"k{j}", _maybe(rng, 0.3, lambda: ints(rng))) for j in range(rng.integers(0, 4))]

    maps = column(entries)

    def structs():
        return [
            _maybe(
                rng,
                0.2,
                lambda: {
                    "x": _maybe(rng, 0.2, lambda: ints(rng)),
                    "s": _maybe(rng, 0.2, lambda: word(rng)),
                },
            )
            for _ in range(int(rng.integers(0, 4)))
        ]

    structs_rows = column(structs)
    structs_rows[2] = [None, {"x": None, "s": None}, {"x": 0, "s": ""}]
    d4 = column(lambda: _lists(rng, 4, ints, 0.12, top=3))
    d4[2], d4[3] = [[[None, [None]]], None, [[[4, None]]]], [[[[]]], [[[], None]]]

    def list_entries():
        return [
            (f"k{j}", _maybe(rng, 0.25, lambda: _lists(rng, 1, ints, 0.2)))
            for j in range(rng.integers(0, 4))
        ]

    map_lists = column(list_entries)
    map_lists[2] = [("a", None), ("b", []), ("c", [None, 0])]

    def structs_of_lists():
        return [
            _maybe(
                rng,
                0.2,
                lambda: {
                    "v": _maybe(rng, 0.2, lambda: _lists(rng, 1, ints, 0.2)),
                    "w": _maybe(rng, 0.2, lambda: word(rng)),
                },
            )
            for _ in range(int(rng.integers(0, 4)))
        ]

    struct_lists = column(structs_of_lists)
    struct_lists[2] = [None, {"v": None, "w": None}, {"v": [], "w": ""}, {"v": [None], "w": "x"}]
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "li": pa.array(li, pa.list_(pa.int64())),
            "grid": pa.array(grid, pa.list_(pa.list_(pa.float32()))),
            "deep": pa.array(deep, pa.list_(pa.list_(pa.list_(pa.int64())))),
            "words": pa.array(words, pa.list_(pa.string())),
            "pairs": pa.array(pairs, pa.list_(pa.list_(pa.int32()))),
            "vec": pa.array(vec, pa.list_(pa.int32())),
            "m": pa.array(maps, pa.map_(pa.string(), pa.int64())),
            "p": pa.array(
                structs_rows,
                pa.list_(pa.struct([("x", pa.int64()), ("s", pa.string())])),
            ),
            "d4": pa.array(d4, pa.list_(pa.list_(pa.list_(pa.list_(pa.int64()))))),
            "ml": pa.array(map_lists, pa.map_(pa.string(), pa.list_(pa.int64()))),
            "ls": pa.array(
                struct_lists,
                pa.list_(pa.struct([("v", pa.list_(pa.int64())), ("w", pa.string())])),
            ),
        }
    )


def leaf_rows(table: pa.Table) -> dict[str, list]:
    """Per leaf feature, each row's value as the source has it (to_pylist; None: null)."""
    has = set(table.column_names)
    names = [n for n in ("li", "grid", "deep", "pairs", "vec", "d4") if n in has]
    out = {name: table.column(name).to_pylist() for name in names}
    out["words"] = [None if r is None else [_b(w) for w in r] for r in table["words"].to_pylist()]
    for m in {"m", "ml"} & has:
        maps = table[m].to_pylist()
        out[f"{m}.key"] = [None if r is None else [k.encode() for k, _ in r] for r in maps]
        out[f"{m}.value"] = [None if r is None else [v for _, v in r] for r in maps]
    for p, fields in (("p", ("x", "s")), ("ls", ("v", "w"))):
        structs = table[p].to_pylist()
        for field in fields:  # a null struct: each of its fields null
            out[f"{p}.{field}"] = [
                None if r is None else [None if e is None else _b(e[field]) for e in r]
                for r in structs
            ]
    return out


def _b(v):
    return v.encode() if isinstance(v, str) else v


def expand(items: list, shape: tuple[int, ...], zero, depth: int = 0) -> tuple[list, dict]:
    """A present row's list as the readers give it, and its masks: level K -> the nested
    bools of the row's level-K items (False: null). A null value is `zero`; a null list of a
    level that varies an empty list, of a fixed dim that many null items."""
    levels = len(shape)
    filled, masks = [], {depth + 1: []}
    for item in items:
        masks[depth + 1].append(item is not None)
        if depth + 1 == levels:
            filled.append(zero if item is None else item)
            continue
        dim = shape[depth + 1]
        inner = item if item is not None else ([] if dim < 0 else [None] * dim)
        value, inner_masks = expand(inner, shape, zero, depth + 1)
        filled.append(value)
        for k, mask in inner_masks.items():
            masks.setdefault(k, []).append(mask)
    for k in range(depth + 2, levels + 1):
        masks.setdefault(k, [])
    return filled, masks


def expected(table: pa.Table) -> dict[str, list]:
    """Every key the readers give, per row: each leaf, its `__present`, its `__present_K`."""
    return expected_leaves(table["id"].to_pylist(), leaf_rows(table), LEAVES)


def expected_leaves(
    ids: list, leaves: dict[str, list], kinds: dict[str, tuple[tuple[int, ...] | None, object]]
) -> dict[str, list]:
    """What the readers give for `leaves` (per leaf feature, each row's source value, None:
    null) whose shapes and zeros are `kinds`: each leaf, its `__present`, its `__present_K`."""
    out: dict[str, list] = {"id": ids}
    for name, rows in leaves.items():
        shape, zero = kinds[name]
        dims = (-1,) if shape is None else shape
        fixed = all(d >= 0 for d in dims)
        out[name], out[name + "__present"] = [], []
        for row in rows:
            if row is None:  # a dense column's null row: zeros, and no value anywhere
                row_value = [zero] * dims[0] if fixed else []
                filled, masks = expand(row_value, dims, zero)
                if fixed:
                    masks = {k: _all_false(m) for k, m in masks.items()}
            else:
                filled, masks = expand(row, dims, zero)
            out[name].append(filled)
            out[name + "__present"].append(row is not None)
            for k, mask in masks.items():
                out.setdefault(f"{name}__present_{k}", []).append(mask)
    return out


def _all_false(v):
    return [_all_false(x) for x in v] if isinstance(v, list) else False


def without_unused_masks(rows: dict[str, list], got: dict[str, list]) -> dict[str, list]:
    """The expected keys the output has: a level without any null has no mask."""
    return {k: v for k, v in rows.items() if k in got}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path, pa.Table]:
    table = make_table()
    directory = tmp_path_factory.mktemp("nulls")
    path = directory / "nulls.parquet"
    pq.write_table(table, path, row_group_size=100)
    config = directory / "job.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    return path, config, table


def convert(source, out: Path, *args) -> Path:
    path, config, _ = source
    argv = ["convert", "--input", path, "--output", out, "--config", config, *args]
    result = run_cli_captured([*argv, "--batch-rows", "64"])
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


def _rows(value) -> list:
    if isinstance(value, tf.RaggedTensor):
        return ragged_to_list(value)
    if isinstance(value, Ragged):
        return value.tolist()
    return value.numpy().tolist() if isinstance(value, tf.Tensor) else value.tolist()


def _by_id(got: dict[str, list]) -> dict[str, list]:
    order = np.argsort(got["id"], kind="stable")
    return {k: [v[i] for i in order] for k, v in got.items()}


def test_the_table_has_nulls_at_every_level(source):
    _, _, table = source
    want = expected(table)
    for name, (shape, _) in LEAVES.items():
        if name.endswith(".key"):
            continue  # a map's keys are never null
        levels = 1 if shape is None else len(shape)
        for k in range(1, levels + 1):
            flat = str(want[f"{name}__present_{k}"])
            assert "False" in flat, (name, k)
        assert want[name + "__present"].count(False) >= 1, name
        assert [] in want[name] or name == "vec", name


def test_manifest_records_the_null_features(output, source):
    _, _, table = source
    features = {f.name: f for f in read_manifest(str(output)).features}
    want = expected(table)
    for name, (shape, _) in LEAVES.items():
        levels = 1 if shape is None else len(shape)
        rows_with = {
            k: sum(
                "False" in str(m)
                for m, p in zip(want[f"{name}__present_{k}"], want[name + "__present"], strict=True)
                if p
            )
            for k in range(1, levels + 1)
        }
        assert dict(features[name].inner_nulls) == {k: r for k, r in rows_with.items() if r}
        assert features[name].null_count == want[name + "__present"].count(False)
    assert features["m.key"].inner_nulls == features["ml.key"].inner_nulls == ()
    keys = {k for r in records(output) for k in tf.train.Example.FromString(r).features.feature}
    deep = {f"deep__nulls_{k}" for k in (1, 2, 3)} | {f"d4__nulls_{k}" for k in (1, 2, 3, 4)}
    assert {"li__nulls_1", "p.s__nulls_1", "ml.value__nulls_2", "ls.v__nulls_2"} | deep <= keys
    assert "m.key__nulls_1" not in keys


def _assert_every_value_and_null(batches, table: pa.Table) -> None:
    """The readers' batches hold the table's values, masks and nulls, row by row."""
    got: dict[str, list] = collections.defaultdict(list)
    for batch in batches:
        for key, value in batch.items():
            got[key] += _rows(value)
    got = _by_id(got)
    want = without_unused_masks(expected(table), got)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], key


def test_load_dataset_gives_every_value_and_null(output, source):
    _assert_every_value_and_null(load_dataset(str(output), batch_size=50), source[2])


def test_iter_batches_gives_every_value_and_null(output, source):
    assert assert_readers_agree(output) == ROWS
    _assert_every_value_and_null(iter_batches(str(output), batch_size=77), source[2])
    assert "li__present" not in next(iter_batches(str(output), null_masks=False))


def test_json_lines_carry_the_same_lists(source, tmp_path):
    """The same columns as JSON Lines (all but the maps: pyarrow's JSON reader reads an
    object as a struct, "JSON conversion to map<...> is not supported"): every value and
    null back through load_dataset."""
    _, config, table = source
    table = table.drop_columns(["m", "ml"])
    path = tmp_path / "nulls.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for row in table.to_pylist():
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "out"
    argv = ["convert", "--input", path, "--output", out, "--config", config, "--batch-rows", "64"]
    result = run_cli_captured(argv)
    assert result.code == 0, result.err
    features = {f.name: f for f in read_manifest(str(out)).features}
    assert features["d4"].spec.shape == (-1, -1, -1, -1) and "ls.v" in features
    _assert_every_value_and_null(load_dataset(str(out), batch_size=50), table)
    result = run_cli_captured(["verify", out, "--source", path])
    assert result.code == 0, result.out + result.err


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


def test_verify_finds_a_null_position_beyond_the_row(source, tmp_path):
    out = convert(source, tmp_path / "out", "--compression", "none")
    shard = out / read_manifest(str(out)).splits["train"].files[0]
    originals = list(read_records(str(shard), 1 << 40))
    at = next(
        i
        for i, r in enumerate(originals)
        if "deep__nulls_2" in tf.train.Example.FromString(r).features.feature
    )
    example = tf.train.Example.FromString(originals[at])
    example.features.feature["deep__nulls_2"].int64_list.value[-1] += 1000
    tampered = [*originals[:at], example.SerializeToString(), *originals[at + 1 :]]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in tampered:
            writer.write(record)
    result = run_cli_captured(["verify", out])
    assert result.code == 1
    assert f"record {at}: feature 'deep': 'deep__nulls_2' holds position" in result.out
    assert "level-2 items" in result.out, result.out
    # load_dataset fails the read naming the feature, instead of marking another row's item
    ds = load_dataset(str(out), "train", batch_size=64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="deep__nulls_2: a null position"):
        for _ in ds:
            pass


def test_random_access_by_index(source, tmp_path):
    _, _, table = source
    want = expected(table)
    out = convert(source, tmp_path / "out", "--index", "--compression", "none")
    for i in (0, 1, 2, 3, ROWS - 1):
        row = read_record(str(out), "train", i)
        j = int(row["id"])
        for key in ("deep", "deep__present_1", "deep__present_2", "deep__present_3", "p.x"):
            assert row[key].tolist() == want[key][j], (key, j)
        assert bool(row["li__present"]) == want["li__present"][j]


def test_statistics_schema_and_inspect(output, source):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    _, _, table = source
    li = table["li"].to_pylist()
    nulls = sum(v is None for r in li if r is not None for v in r)
    holding = sum(any(v is None for v in r) for r in li if r is not None)
    manifest = read_manifest(str(output))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (output / manifest.statistics["train"]).read_bytes()
    ).datasets[0]
    names = [f.path.step[0] for f in stats.features]
    common = {f.path.step[0]: f.num_stats.common_stats for f in stats.features}
    assert names.index("li__nulls_1") == names.index("li") + 1
    assert common["li__nulls_1"].tot_num_values == nulls
    assert common["li__nulls_1"].num_non_missing == holding
    assert common["li__nulls_1"].num_missing == ROWS - holding
    assert names.index("deep__nulls_1") > names.index("deep__row_lengths_2")
    schema = text_format.Parse(
        (output / manifest.schema).read_text(encoding="utf-8"), schema_pb2.Schema()
    )
    order = [f.name for f in schema.feature]
    assert order.index("li__nulls_1") == order.index("li") + 1
    result = run_cli_captured(["inspect", output, "--records", "3"])
    assert result.code == 0, result.err
    shown = json.loads(result.out)["manifest"]["features"]
    assert list(shown).index("li__nulls_1") == list(shown).index("li") + 1
    assert shown["li"]["inner_nulls"] == {"1": holding}
    report = run_cli_captured(["report", output])
    assert report.code == 0, report.err
    page = (output / "report.html").read_text(encoding="utf-8")
    assert "deep__nulls_3" in page and "features the manifest does not list" not in page


def test_lists_without_nulls_inside_keep_their_bytes():
    """Null rows and empty lists but no null inside a list: the records are the Examples
    protobuf serializes (no null-positions feature), as before nulls inside lists existed."""
    rows = [[1, 2], None, [], [0], None, [-(2**63)]]
    words = [["a", ""], [], None, ["x"], [], None]
    table = pa.table({"li": pa.array(rows, pa.list_(pa.int64())), "w": pa.array(words)})
    specs = plan_features(table.schema)
    encoded, stats = encode_table(table, specs, "t", 0)
    for record, li, w in zip(encoded.records(), rows, words, strict=True):
        example = tf.train.Example()
        if li is not None:
            example.features.feature["li"].int64_list.value.extend(li)
        if w is not None:
            example.features.feature["w"].bytes_list.value.extend(s.encode() for s in w)
        assert record == example.SerializeToString(deterministic=True)
    assert stats.nulls == {"li": 2, "w": 2}


def test_a_column_named_as_null_positions_is_refused():
    schema = pa.schema([("v", pa.list_(pa.int64())), ("v__nulls_1", pa.int64())])
    with pytest.raises(SchemaError, match=r"v__nulls_1.*occur twice"):
        plan_features(schema)


def test_keep_float64_and_decimal_lists_with_nulls(tmp_path):
    """A keep_float64 list (one bytes value per row) and a decimal list (text) with null
    elements: 0.0 and an empty value written, the masks as for any list."""
    import decimal

    table = pa.table(
        {
            "id": pa.array(range(4)),
            "k": pa.array([[1.5, None], None, [], [None]], pa.list_(pa.float64())),
            "kf": pa.array([[1.5, None], [None, 2.0], [0.0, 1.0], [3.0, 4.0]],
                           pa.list_(pa.float64(), 2)),
            "d": pa.array([[decimal.Decimal("1.50"), None], None, [], [None]],
                          pa.list_(pa.decimal128(5, 2))),
        }
    )  # fmt: skip
    path, config = tmp_path / "k.parquet", tmp_path / "k.yaml"
    pq.write_table(table, path)
    config.write_text("columns:\n  k: {keep_float64: true}\n  kf: {keep_float64: true}\n")
    out = convert((path, config, table), tmp_path / "out")
    assert assert_readers_agree(out) == 4
    (batch,) = list(iter_batches(str(out), batch_size=8))
    assert batch["k"].tolist() == [[1.5, 0.0], [], [], [0.0]]
    assert batch["k__present"].tolist() == [True, False, True, True]
    assert batch["k__present_1"].tolist() == [[True, False], [], [], [False]]
    assert batch["kf"].tolist() == [[1.5, 0.0], [0.0, 2.0], [0.0, 1.0], [3.0, 4.0]]
    full = [True, True]
    assert batch["kf__present_1"].tolist() == [[True, False], [False, True], full, full]
    assert batch["d"].tolist() == [[b"1.50", b""], [], [], [b""]]
    assert batch["d__present_1"].tolist() == [[True, False], [], [], [False]]
    result = run_cli_captured(["verify", out, "--source", path])
    assert result.code == 0, result.out + result.err


def test_tfds_layout_declares_the_null_positions(tmp_path):
    """The tfds layout declares each `NAME__nulls_K` a list wrote, and TFDS reads them: the
    source's lists come back with None where the positions say (a null list as an empty one,
    as TFDS gives it)."""
    import tensorflow_datasets as tfds
    from test_layouts import _tfds_rows

    li = [[1, None, 0], None, [], [None], [5, 6], [0, 0, None, 7]]
    words = [["a", None], ["b"], None, [None, None, ""], [], ["z"]]
    ids = list(range(len(li)))
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ids, "li": li, "words": words}), path)
    out = tmp_path / "out"
    result = run_cli_captured(["convert", "--input", str(path), "--output", str(out),
                               "--layout", "tfds"])  # fmt: skip
    assert result.code == 0, result.err
    features = json.loads((out / "features.json").read_text(encoding="utf-8"))
    declared = features["featuresDict"]["features"]
    assert {"li__nulls_1", "words__nulls_1"} <= set(declared)
    assert declared["li__nulls_1"]["tensor"]["dtype"] == "int64"
    rows = sorted(_tfds_rows(tfds.builder_from_directory(str(out)), "train"),
                  key=lambda r: int(r["id"]))  # fmt: skip
    assert len(rows) == len(ids)
    for row, want_li, want_words in zip(rows, li, words, strict=True):
        got_li = [int(v) for v in row["li"]]
        for i in row["li__nulls_1"].tolist():
            got_li[i] = None
        got_words = [v.decode() for v in row["words"]]
        for i in row["words__nulls_1"].tolist():
            got_words[i] = None
        assert got_li == (want_li or []) and got_words == (want_words or [])
    # a table with no null inside its lists declares no positions
    pq.write_table(pa.table({"id": ids, "li": [[1], None, [], [2], [3], [4]]}), path)
    again = tmp_path / "again"
    result = run_cli_captured(["convert", "--input", str(path), "--output", str(again),
                               "--layout", "tfds"])  # fmt: skip
    assert result.code == 0, result.err
    features = json.loads((again / "features.json").read_text(encoding="utf-8"))
    assert not [k for k in features["featuresDict"]["features"] if "__nulls_" in k]
