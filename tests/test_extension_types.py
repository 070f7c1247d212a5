"""Arrow's canonical extension types, list views, and containers of containers round trip
(docs/types.md, "Extension types and list views"): what pyarrow writes to Parquet beyond the
types of tests/test_scalar_types.py and tests/test_nulls_in_lists.py.

A seeded table of bool8, uuid, json, fixed_shape_tensor (alone and in a list), list_view and
large_list_view, a struct of extension types, maps of structs and of maps, a struct of a map,
a list of maps, a struct of a struct, a list of lists of structs and a map with int keys ->
convert (in-process at 1 and 2 workers, and Beam) -> `load_dataset` and `iter_batches` ->
every value, null and null position equal to the source's; verify with the source; the
conversion of each type on its own (`plain_types`), slices included.
"""

from __future__ import annotations

import collections
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli_captured
from test_nulls_in_lists import _by_id, _rows, expected_leaves, records

from pipeline.output.manifest import read_manifest
from pipeline.reader import load_dataset
from pipeline.reader.arrays import iter_batches
from transforms.read.plain_types import plain_schema, plain_table, plain_type

ROWS = 160
TENSOR = pa.fixed_shape_tensor(pa.int32(), [2, 3])
CONFIG = (
    "columns:\n"
    "  list_map.key: {shape: [-1, -1]}\n"
    "  list_map.value: {shape: [-1, -1]}\n"
    "  map_map.value.key: {shape: [-1, -1]}\n"
    "  map_map.value.value: {shape: [-1, -1]}\n"
    "  lls.x: {shape: [-1, -1]}\n"
)
# scalar leaf -> the zero a null is written as
SCALARS = {"b8": False, "u": b"", "js": b"", "st.u": b"", "st.b": False, "ss.a.b": 0}
# list leaf -> (shape as the manifest gives it, the zero a null is written as)
LISTS = {
    "ten": ((2, 3), 0),
    "lv": (None, 0),
    "llv": (None, b""),
    "lt": ((-1, 2, 3), 0),
    "ms.key": (None, b""),
    "ms.value.x": (None, 0),
    "sm.m.key": (None, b""),
    "sm.m.value": (None, 0),
    "list_map.key": ((-1, -1), b""),
    "list_map.value": ((-1, -1), 0),
    "map_map.key": (None, b""),
    "map_map.value.key": ((-1, -1), b""),
    "map_map.value.value": ((-1, -1), 0),
    "lls.x": ((-1, -1), 0),
    "mik.key": (None, 0),
    "mik.value": (None, b""),
}


def _maybe(rng: np.random.Generator, p: float, make):
    return None if rng.random() < p else make()


def _n(rng: np.random.Generator, top: int = 4) -> int:
    return int(rng.integers(0, top))


def make_table(n: int = ROWS, seed: int = 29) -> pa.Table:
    rng = np.random.default_rng(seed)
    small = lambda: int(rng.integers(-9, 9))  # noqa: E731
    word = lambda: str(rng.choice(["", "a", "ünï"]))  # noqa: E731

    def column(make, p: float = 0.15) -> list:
        rows = [_maybe(rng, p, make) for _ in range(n)]
        rows[0], rows[1] = None, make()
        return rows

    def entries(value) -> list:
        return [(f"k{j}", _maybe(rng, 0.2, value)) for j in range(_n(rng))]

    b8 = column(lambda: int(rng.choice([0, 1, 2, -1])))
    b8[1] = 0
    uuids = column(lambda: uuid.UUID(int=int(rng.integers(0, 2**62))).bytes)
    texts = column(lambda: json.dumps({"v": small(), "w": [word()]}))
    tensors = [[int(v) for v in rng.integers(-99, 99, 6)] for _ in range(n)]
    tensors[1] = [0] * 6
    lv = column(lambda: [_maybe(rng, 0.2, small) for _ in range(_n(rng))])
    lv[1] = []
    llv = column(lambda: [_maybe(rng, 0.2, word) for _ in range(_n(rng))])
    lt = column(lambda: [[small() for _ in range(6)] for _ in range(_n(rng, 3))])
    st = column(lambda: {"u": _maybe(rng, 0.2, lambda: bytes(16)), "b": _maybe(rng, 0.2, small)})
    ms = column(lambda: entries(lambda: {"x": _maybe(rng, 0.2, small)}))
    sm = column(lambda: {"m": _maybe(rng, 0.2, lambda: entries(small))})
    list_map = column(lambda: [_maybe(rng, 0.2, lambda: entries(small)) for _ in range(_n(rng))])
    map_map = column(lambda: entries(lambda: entries(small)))
    ss = column(lambda: {"a": _maybe(rng, 0.2, lambda: {"b": _maybe(rng, 0.2, small)})})
    lls = column(
        lambda: [
            _maybe(rng, 0.2, lambda: [_maybe(rng, 0.2, lambda: {"x": small()})] * _n(rng))
            for _ in range(_n(rng))
        ]
    )
    mik = column(lambda: [(j, _maybe(rng, 0.2, word)) for j in range(_n(rng))])

    def ext(t: pa.ExtensionType, storage: pa.Array) -> pa.Array:
        return pa.ExtensionArray.from_storage(t, storage)

    b8_storage = pa.array([None if v is None else v for v in b8], pa.int8())
    ints = pa.list_(pa.int32(), 6)
    lt_storage = pa.array(lt, pa.list_(ints))
    lt_array = pa.ListArray.from_arrays(
        lt_storage.offsets, ext(TENSOR, lt_storage.values), mask=lt_storage.is_null()
    )
    st_type = pa.struct([("u", pa.binary(16)), ("b", pa.int8())])
    st_storage = pa.array(st, st_type)
    st_array = pa.StructArray.from_arrays(
        [ext(pa.uuid(), st_storage.field(0)), ext(pa.bool8(), st_storage.field(1))],
        ["u", "b"],
        mask=st_storage.is_null(),
    )
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "b8": ext(pa.bool8(), b8_storage),
            "u": ext(pa.uuid(), pa.array(uuids, pa.binary(16))),
            "js": ext(pa.json_(), pa.array(texts, pa.string())),
            "ten": ext(TENSOR, pa.array(tensors, ints)),
            "lv": pa.array(lv, pa.list_view(pa.int64())),
            "llv": pa.array(llv, pa.large_list_view(pa.string())),
            "lt": lt_array,
            "st": st_array,
            "ms": pa.array(ms, pa.map_(pa.string(), pa.struct([("x", pa.int64())]))),
            "sm": pa.array(sm, pa.struct([("m", pa.map_(pa.string(), pa.int64()))])),
            "list_map": pa.array(list_map, pa.list_(pa.map_(pa.string(), pa.int64()))),
            "map_map": pa.array(map_map, pa.map_(pa.string(), pa.map_(pa.string(), pa.int64()))),
            "ss": pa.array(ss, pa.struct([("a", pa.struct([("b", pa.int64())]))])),
            "lls": pa.array(lls, pa.list_(pa.list_(pa.struct([("x", pa.int64())])))),
            "mik": pa.array(mik, pa.map_(pa.int32(), pa.string())),
        }
    )


def _b(v):
    return v.encode() if isinstance(v, str) else v


def _walk(v, f):
    return [_walk(x, f) for x in v] if isinstance(v, list) else (None if v is None else f(v))


def _field(rows: list, *path: str) -> list:
    """A struct leaf per row (a null struct: its fields null)."""
    for name in path:
        rows = [None if r is None else r[name] for r in rows]
    return rows


def _keys(rows: list) -> list:
    return [None if r is None else [k for k, _ in r] for r in rows]


def _values(rows: list) -> list:
    return [None if r is None else [v for _, v in r] for r in rows]


def _uuid(v):
    return None if v is None else v.bytes


def _entries(rows: list, part: int, f=lambda v: v) -> list:
    """A map column's keys (0) or values (1) per row, each through `f`."""
    return [None if r is None else [f(e[part]) for e in r] for r in rows]


def _each(rows: list, f) -> list:
    """`f` over each item of each row's list (a null row or item stays None)."""
    return [None if r is None else [None if v is None else f(v) for v in r] for r in rows]


def source_leaves(table: pa.Table) -> tuple[dict[str, list], dict[str, list]]:
    """Per scalar leaf and per list leaf, each row's value as the readers restore it (None:
    null), written out from the source's Python values type by type."""
    col = {name: table[name].to_pylist() for name in table.column_names}
    scalars = {
        "b8": col["b8"],  # bool8: 0 false, any other value true
        "u": [_uuid(v) for v in col["u"]],
        "js": [None if v is None else v.encode() for v in col["js"]],
        "st.u": [_uuid(v) for v in _field(col["st"], "u")],
        "st.b": _field(col["st"], "b"),
        "ss.a.b": _field(col["ss"], "a", "b"),
    }
    grid = lambda t: [t[0:3], t[3:6]]  # noqa: E731  (a tensor's stored values, shape [2, 3])
    ms, sm, mm, lm = col["ms"], _field(col["sm"], "m"), col["map_map"], col["list_map"]
    lists = {
        "ten": [grid(t) for t in col["ten"]],
        "lv": col["lv"],
        "llv": _each(col["llv"], str.encode),
        "lt": _each(col["lt"], grid),
        "ms.key": _entries(ms, 0, str.encode),
        "ms.value.x": _entries(ms, 1, lambda v: None if v is None else v["x"]),
        "sm.m.key": _entries(sm, 0, str.encode),
        "sm.m.value": _entries(sm, 1),
        "list_map.key": [None if r is None else _entries(r, 0, str.encode) for r in lm],
        "list_map.value": [None if r is None else _entries(r, 1) for r in lm],
        "map_map.key": _entries(mm, 0, str.encode),
        "map_map.value.key": [
            None if r is None else _entries(_entries([r], 1)[0], 0, str.encode) for r in mm
        ],
        "map_map.value.value": [
            None if r is None else _entries(_entries([r], 1)[0], 1) for r in mm
        ],
        "lls.x": [None if r is None else _each(r, lambda s: s["x"]) for r in col["lls"]],
        "mik.key": _entries(col["mik"], 0),
        "mik.value": _entries(col["mik"], 1, lambda v: None if v is None else v.encode()),
    }
    return scalars, lists


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path, pa.Table]:
    table = make_table()
    directory = tmp_path_factory.mktemp("extension")
    path = directory / "extension.parquet"
    pq.write_table(table, path, row_group_size=40)
    config = directory / "job.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    return path, config, table


def convert(source, out: Path, *args: str) -> Path:
    path, config, _ = source
    argv = ["convert", "--input", path, "--output", out, "--config", config, "--batch-rows", "32"]
    result = run_cli_captured([*argv, *args])
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module", params=["in-process", "beam"])
def output(request, source) -> Path:
    path, _, _ = source
    return convert(source, path.parent / f"out-{request.param}", "--engine", request.param)


def test_the_source_keeps_its_types(source):
    """The Parquet file holds the types under test, as the job reads them."""
    path, _, _ = source
    schema = pq.read_schema(path)
    assert schema.field("b8").type == pa.bool8() and schema.field("u").type == pa.uuid()
    assert schema.field("js").type == pa.json_() and schema.field("ten").type == TENSOR
    assert pa.types.is_list_view(schema.field("lv").type)
    assert pa.types.is_large_list_view(schema.field("llv").type)
    assert schema.field("lt").type.value_type == TENSOR


def expected(table: pa.Table) -> dict[str, list]:
    scalars, lists = source_leaves(table)
    out = expected_leaves(table["id"].to_pylist(), lists, LISTS)
    for name, rows in scalars.items():
        zero = SCALARS[name]
        out[name] = [zero if v is None else v for v in rows]
        out[name + "__present"] = [v is not None for v in rows]
    return out


def _collect(batches) -> dict[str, list]:
    got: dict[str, list] = collections.defaultdict(list)
    for batch in batches:
        for key, value in batch.items():
            got[key] += _rows(value)
    return _by_id(got)


def _assert_every_value(got: dict[str, list], table: pa.Table) -> None:
    want = expected(table)
    masks = {k for k in want if "__present" in k}
    with_nulls = {k for k in masks if not all(_flat_true(v) for v in want[k])}
    assert with_nulls <= set(got), sorted(with_nulls - set(got))  # a mask for every null
    assert set(got) <= set(want), sorted(set(got) - set(want))
    for key in got:
        assert got[key] == want[key], key


def _flat_true(v) -> bool:
    return all(_flat_true(x) for x in v) if isinstance(v, list) else bool(v)


def test_load_dataset_gives_every_value_and_null(output, source):
    got = _collect(load_dataset(str(output), batch_size=50))
    _assert_every_value(got, source[2])
    assert "b8__present" in got and "lt__present" in got and "ten" in got


def test_iter_batches_gives_every_value_and_null(output, source):
    _assert_every_value(_collect(iter_batches(str(output), batch_size=45)), source[2])


def test_manifest_shapes_and_dtypes(output):
    features = {f.name: f.spec for f in read_manifest(str(output)).features}
    assert features["b8"].dtype == "bool" and features["st.b"].dtype == "bool"
    assert features["u"].dtype == "string" and features["js"].dtype == "string"
    assert features["ten"].shape == (2, 3) and features["ten"].dtype == "int32"
    assert features["lt"].shape == (-1, 2, 3) and features["lv"].shape is None
    assert features["mik.key"].dtype == "int32"


def test_engines_and_worker_counts_write_the_same_records(source, output, tmp_path):
    one = convert(source, tmp_path / "one", "--workers", "1")
    two = convert(source, tmp_path / "two", "--workers", "2")
    assert records(one) == records(two) == records(output)


def test_verify_with_the_source(output, source):
    path, _, _ = source
    result = run_cli_captured(["verify", output, "--source", path])
    assert result.code == 0, result.out + result.err


def test_plain_types_of_each_kind():
    """Each type's plain type, and the arrays converted to it (a slice too)."""
    assert plain_type(pa.bool8()) == pa.bool_()
    assert plain_type(pa.uuid()) == pa.binary(16)
    assert plain_type(pa.json_()) == pa.string()
    assert plain_type(TENSOR) == pa.list_(pa.list_(pa.int32(), 3), 2)
    assert plain_type(pa.list_view(pa.uuid())) == pa.list_(pa.binary(16))
    assert plain_type(pa.large_list_view(pa.int8())) == pa.large_list(pa.int8())
    nested = pa.map_(pa.string(), pa.struct([("t", TENSOR), ("b", pa.bool8())]))
    assert plain_type(nested) == pa.map_(
        pa.string(), pa.struct([("t", plain_type(TENSOR)), ("b", pa.bool_())])
    )
    table = make_table(40, seed=3)
    schema = plain_schema(table.schema)
    assert plain_schema(schema) is schema  # plain already: as it is
    for part in (table, table.slice(7), table.slice(3, 11)):
        plain = plain_table(part, schema)
        assert plain.schema == schema
        scalars, lists = source_leaves(part)
        assert plain["b8"].to_pylist() == scalars["b8"]
        assert plain["u"].to_pylist() == scalars["u"]
        assert plain["ten"].to_pylist() == lists["ten"]
        assert plain["lt"].to_pylist() == lists["lt"]
        assert plain["lv"].to_pylist() == lists["lv"]
        assert plain["st"].to_pylist() == [
            None if r is None else {"u": _uuid(r["u"]), "b": r["b"]} for r in part["st"].to_pylist()
        ]
