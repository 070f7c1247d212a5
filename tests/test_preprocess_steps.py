"""Every row-local step against a plain-Python reference, on random data with nulls (and NaN)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from transforms.batch import TableBatch
from transforms.hashing import hash_bytes, hash_column
from transforms.preprocess import ops as st
from transforms.preprocess.chain import apply_steps, parse_steps, plan_preprocess, prepare_fitted

N = 500
WORDS = ["a", "B", "cc", " Dd ", "e f", "", "ÄÖ", "x\ty", "  "]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def floats(seed: int = 0, nan: bool = True) -> pa.Array:
    r = rng(seed)
    values = r.normal(3.0, 10.0, N)
    if nan:
        values[r.random(N) < 0.05] = np.nan
    return pa.array(values, mask=r.random(N) < 0.1)


def ints(seed: int = 1, low: int = -50, high: int = 50) -> pa.Array:
    r = rng(seed)
    return pa.array(r.integers(low, high, N), mask=r.random(N) < 0.1)


def texts(seed: int = 2) -> pa.Array:
    r = rng(seed)
    words = [WORDS[i] + WORDS[j] for i, j in r.integers(0, len(WORDS), (N, 2))]
    return pa.array(words, mask=r.random(N) < 0.1)


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def same(out: pa.Array, expected: list, rel: float = 1e-12) -> None:
    got = out.to_pylist()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if e is None or g is None:
            assert g is None and e is None, (i, g, e)
        elif isinstance(e, float) and math.isnan(e):
            assert math.isnan(g), (i, g)
        elif isinstance(e, float):
            assert g == pytest.approx(e, rel=rel, abs=1e-12), (i, g, e)
        else:
            assert g == e, (i, g, e)


# ----------------------------------------------------------------------------- numbers


def test_fill_missing_replaces_null_and_nan():
    arr = floats()
    expected = [7.5 if is_missing(v) else v for v in arr.to_pylist()]
    same(st.fill_missing(arr, pa.scalar(7.5)), expected)
    arr = ints()
    same(st.fill_missing(arr, pa.scalar(3)), [3 if v is None else v for v in arr.to_pylist()])


def test_clip_keeps_null_and_nan():
    arr = floats()
    low, high = pa.scalar(-2.0), pa.scalar(5.0)
    ref = [v if is_missing(v) else min(max(v, -2.0), 5.0) for v in arr.to_pylist()]
    same(st.clip(arr, low, high), ref)
    same(st.clip(arr, None, high), [v if is_missing(v) else min(v, 5.0) for v in arr.to_pylist()])
    arr = ints()
    same(
        st.clip(arr, pa.scalar(0), None),
        [None if v is None else max(v, 0) for v in arr.to_pylist()],
    )


def test_log1p_is_null_outside_the_domain():
    arr = pa.array([*floats().to_pylist(), -1.0, -1.5, -0.5])
    ref = []
    for v in arr.to_pylist():
        if v is None or (not math.isnan(v) and v <= -1):
            ref.append(None)
        else:
            ref.append(math.log1p(v) if not math.isnan(v) else math.nan)
    same(st.log1p(arr), ref)
    assert st.log1p(ints()).type == pa.float64()


def test_zscore_and_min_max_match_the_formula():
    arr = floats()
    ref = [v if is_missing(v) else (v - 2.0) / 4.0 for v in arr.to_pylist()]
    same(st.zscore(arr, 2.0, 4.0), ref)
    same(st.zscore(arr, 2.0, 0.0), [v if is_missing(v) else v - 2.0 for v in arr.to_pylist()])
    assert st.zscore(arr, None, None).null_count == N
    arr = ints()
    ref = [None if v is None else (v + 50) / 100 * 2 - 1 for v in arr.to_pylist()]
    same(st.min_max(arr, -50, 50, -1.0, 1.0), ref)
    same(st.min_max(arr, 3, 3, 0.0, 1.0), [None if v is None else 0.0 for v in arr.to_pylist()])


def test_bucketize_counts_boundaries_strictly_below():
    arr = floats()
    cuts = [-5.0, 0.0, 0.0, 3.0, 12.5]
    ref = [None if is_missing(v) else sum(c < v for c in cuts) for v in arr.to_pylist()]
    same(st.bucketize(arr, cuts), ref)
    same(st.bucketize(pa.array([0.0, 3.0, 3.5]), cuts), [1, 3, 4])
    same(st.bucketize(ints(), []), [None if v is None else 0 for v in ints().to_pylist()])


def test_cast_is_safe():
    same(st.cast(ints(), pa.float32()), ints().to_pylist())
    with pytest.raises(pa.ArrowInvalid):
        st.cast(pa.array([1.0, 2.5]), pa.int64())


# ----------------------------------------------------------------------------- text


def test_lower_strip_split_match_python():
    arr = texts()
    values = arr.to_pylist()
    same(st.lower(arr), [None if v is None else v.lower() for v in values])
    same(st.strip(arr), [None if v is None else v.strip() for v in values])
    same(st.strip(arr, "a "), [None if v is None else v.strip("a ") for v in values])
    same(st.split_text(arr), [None if v is None else v.split() for v in values])
    same(st.split_text(arr, " "), [None if v is None else v.split(" ") for v in values])
    sliced = arr.slice(7, 100)  # offsets not starting at 0
    same(st.split_text(sliced), [None if v is None else v.split() for v in sliced.to_pylist()])


def test_hash_equals_the_documented_reference():
    arr = texts()
    expected = [hash_bytes((v or "").encode("utf-8")) for v in arr.to_pylist()]
    assert hash_column(arr).tolist() == expected
    # Golden values: FNV-1a 64 + fmix64 must never change (saved models depend on the buckets).
    golden = {"": 17280346270528514342, "Cash": 5770863581926022376}
    golden["Credit Card"] = 16446734953629789122
    assert hash_column(pa.array(list(golden))).tolist() == list(golden.values())
    assert [hash_bytes(k.encode()) for k in golden] == list(golden.values())
    assert hash_column(pa.array([-12], pa.int32())).tolist() == [hash_bytes(b"-12")]
    assert hash_column(pa.array([b"\x00\xff"], pa.binary())).tolist() == [hash_bytes(b"\x00\xff")]


def test_hash_bucket_is_stable_across_processes():
    code = (
        "import pyarrow as pa; from transforms.preprocess.ops import hash_bucket; "
        "print(hash_bucket(pa.array(['Cash', 'Credit Card', 'Pcard']), 16).to_pylist())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    here = st.hash_bucket(pa.array(["Cash", "Credit Card", "Pcard"]), 16).to_pylist()
    assert other.stdout.strip() == str(here)


def test_hash_bucket_spreads_and_keeps_nulls():
    arr = texts()
    out = st.hash_bucket(arr, 7)
    ref = [None if v is None else hash_bytes(v.encode()) % 7 for v in arr.to_pylist()]
    same(out, ref)
    many = st.hash_bucket(pa.array([f"value-{i}" for i in range(7000)]), 7).to_numpy()
    counts = np.bincount(many, minlength=7)
    assert counts.min() > 850  # about 1000 each


# ----------------------------------------------------------------------------- ids, shapes


def test_vocabulary_ids_and_oov_buckets():
    vocab = pa.array(["cc", "a", ""])
    arr = texts()
    values = arr.to_pylist()
    out = st.vocabulary_ids(arr, vocab, 3)
    ref = []
    for v in values:
        if v is None:
            ref.append(None)
        elif v in vocab.to_pylist():
            ref.append(vocab.to_pylist().index(v))
        else:
            ref.append(3 + hash_bytes(v.encode()) % 3)
    same(out, ref)
    no_oov = st.vocabulary_ids(arr, vocab, 0).to_pylist()
    assert {r for r, v in zip(no_oov, values, strict=True) if v not in ("cc", "a", "") and v} == {
        -1
    }
    by_text = st.vocabulary_ids(pa.array([5, None, 7]), pa.array(["7", "5"]), 0)
    assert by_text.to_pylist() == [1, None, 0]


def test_one_hot():
    arr = pa.array(rng(3).integers(0, 5, N), mask=rng(4).random(N) < 0.1)
    out = st.one_hot(arr, 5, pa.float32())
    assert out.type == pa.list_(pa.float32(), 5)
    ref = [None if v is None else [float(i == v) for i in range(5)] for v in arr.to_pylist()]
    same(out, ref)
    with pytest.raises(st.RowError) as err:
        st.one_hot(pa.array([0, 2, 5]), 5, pa.int8())
    assert err.value.index == 2


def test_reshape_flat_and_nested_lists():
    r = rng(5)
    rows = [None if r.random() < 0.1 else [int(x) for x in r.integers(0, 9, 6)] for _ in range(N)]
    arr = pa.array(rows, pa.list_(pa.int32()))
    out = st.reshape(arr, [2, 3])
    assert out.type == pa.list_(pa.list_(pa.int32(), 3), 2)
    same(out, [None if v is None else [v[:3], v[3:]] for v in rows])
    nested = pa.array([None if v is None else [v[:2], v[2:]] for v in rows])
    same(st.reshape(nested, [6]), [v for v in rows])
    sliced = arr.slice(3, 50)
    same(
        st.reshape(sliced, [3, 2]),
        [None if v is None else [v[:2], v[2:4], v[4:]] for v in rows[3:53]],
    )
    with pytest.raises(st.RowError) as err:
        st.reshape(pa.array([[1, 2], [1, 2, 3]]), [2])
    assert err.value.index == 1


# ----------------------------------------------------------------------------- whole plans


def _table() -> pa.Table:
    return pa.table({"x": floats(), "n": ints(), "s": texts(), "k": ints(9, 0, 4)})


@pytest.mark.parametrize(
    "step",
    [
        {"select": {"columns": ["s", "x"]}},
        {"drop": {"columns": ["s"]}},
        {"rename": {"columns": {"x": "y", "s": "x"}}},
        {"cast": {"column": "n", "to": "float32"}},
        {"fill_missing": {"column": "s", "value": "?", "output": "t"}},
        {"clip": {"column": "n", "min": -3, "max": 3}},
        {"log1p": {"column": "x"}},
        {"filter": {"expr": "x > 0 or n in [1, 2]"}},
        {"derive": {"name": "z", "expr": "where(n > 0, x * 2, -x) / n"}},
        {"hash_bucket": {"column": "s", "num_buckets": 8}},
        {"lower": {"column": "s"}},
        {"strip": {"column": "s", "output": "t"}},
        {"split": {"column": "s", "sep": " "}},
        {"one_hot": {"column": "k", "depth": 4, "dtype": "int8"}},
    ],
    ids=lambda s: next(iter(s)),
)
def test_applied_schema_equals_the_planned_schema(step):
    table = _table()
    plan = plan_preprocess(parse_steps([step], "t.yaml"), table.schema)
    out = apply_steps(plan, TableBatch(table, "t", 0), {})
    assert out.table.schema == plan.output_schema
    if "filter" in step:
        x, n = table.column("x").to_pylist(), table.column("n").to_pylist()
        keep = [i for i in range(N) if (x[i] is not None and x[i] > 0) or n[i] in (1, 2)]
        assert out.rows.tolist() == keep
    else:
        assert out.rows is None and out.table.num_rows == N


def test_rows_follow_the_source_through_filters():
    table = pa.table({"a": pa.array(range(10))})
    filters = [{"filter": {"expr": "a > 2"}}, {"filter": {"expr": "a != 5"}}]
    plan = plan_preprocess(parse_steps(filters, "t.yaml"), table.schema)
    out = apply_steps(plan, TableBatch(table, "f.csv", 100), prepare_fitted(plan, {}))
    assert out.rows.tolist() == [103, 104, 106, 107, 108, 109]
    again = apply_steps(plan, out, {})
    assert again.rows.tolist() == [103, 104, 106, 107, 108, 109]
    nothing = plan_preprocess(parse_steps([{"filter": {"expr": "a > 100"}}], "t"), table.schema)
    assert apply_steps(nothing, TableBatch(table, "f.csv", 0), {}) is None


def test_select_drop_rename_keep_the_values():
    table = _table()
    picked = st.select(table, ["s", "x"])
    assert picked.column_names == ["s", "x"] and picked.column("s").equals(table.column("s"))
    assert st.drop(table, ["s", "n"]).column_names == ["x", "k"]
    renamed = st.rename(table, {"x": "y", "s": "x"})
    assert renamed.column_names == ["y", "n", "x", "k"]
    assert renamed.column("x").equals(table.column("s"))
    # lenient (analysis passes): a missing name is skipped, a new name replaces a column
    lenient = st.rename(table, {"gone": "x", "n": "k"})
    assert lenient.column_names == ["x", "k", "s"]
    assert lenient.column("k").equals(table.column("n"))
