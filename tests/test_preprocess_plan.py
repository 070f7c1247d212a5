"""Planning: config errors name the file and key; the output schema is known up front;
analyzers see the data as the steps before them leave it, in as few passes as possible;
errors on a row name the file, row and column; artifacts round-trip."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from pipeline.job.config import ConfigError, load_config
from transforms.batch import TableBatch
from transforms.encode.records import encode_table
from transforms.encode.schema import ConversionError, plan_features
from transforms.preprocess.analyzers import AnalyzeFn
from transforms.preprocess.artifacts import check_artifacts, read_artifacts, write_artifacts
from transforms.preprocess.chain import (
    PreprocessError,
    analysis_inputs,
    apply_steps,
    parse_steps,
    plan_preprocess,
    prepare_fitted,
)
from transforms.preprocess.spec import StepError

SOURCE = "configs/x.yaml"


def make_table(n: int = 3000, seed: int = 0) -> pa.Table:
    r = np.random.default_rng(seed)
    fare = r.gamma(2.0, 6.0, n)
    fare[r.random(n) < 0.05] = -1.0
    return pa.table(
        {
            "fare": pa.array(fare, mask=r.random(n) < 0.1),
            "miles": pa.array(r.exponential(3.0, n)),
            "company": pa.array(
                r.choice(["A", "B", "C", "D", "E"], n, p=[0.4, 0.3, 0.2, 0.07, 0.03]).tolist(),
                mask=r.random(n) < 0.1,
            ),
            "hour": pa.array(r.integers(0, 24, n)),
        }
    )


def plan_of(steps: list, schema: pa.Schema):
    return plan_preprocess(parse_steps(steps, SOURCE), schema)


def batches_of(table: pa.Table, rows: int = 700) -> list[TableBatch]:
    return [TableBatch(table.slice(s, rows), "in.csv", s) for s in range(0, table.num_rows, rows)]


def fit(plan, batches):
    """The analysis passes in memory, as FitPreprocess runs them."""
    fitted: dict = {}
    for level in range(1, plan.num_passes + 1):
        fn = AnalyzeFn(plan.analyzers(level))
        acc = fn.create_accumulator()
        for batch in batches:
            acc = fn.add_input(
                acc, analysis_inputs(plan, level, batch, prepare_fitted(plan, fitted))
            )
        fitted.update(fn.extract_output(acc))
    return fitted


def run(plan, batches, fitted):
    prepared = prepare_fitted(plan, fitted)
    outs = [apply_steps(plan, b, prepared) for b in batches]
    return pa.concat_tables([o.table for o in outs if o is not None])


# ----------------------------------------------------------------------------- config errors


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "x.yaml"
    path.write_text("input: a.csv\noutput: out\n" + text)
    return str(path)


@pytest.mark.parametrize(
    ("yaml", "key", "message"),
    [
        ("transforms: {zscore: {column: fare}}", "'transforms'", "expected a list"),
        ("transforms: [zscore]", "'transforms[0]'", "one-key mapping"),
        ("transforms:\n  - zscor: {column: fare}", "'transforms[0]'", "unknown step 'zscor'"),
        (
            "transforms:\n  - zscore: {colum: fare}",
            "'transforms[0].zscore.colum'",
            "unknown parameter",
        ),
        ("transforms:\n  - zscore: {}", "'transforms[0].zscore.column'", "required"),
        (
            "transforms:\n  - clip: {column: a, min: x}",
            "'transforms[0].clip.min'",
            "expected a number",
        ),
        (
            "transforms:\n  - hash_bucket: {column: a, num_buckets: true}",
            "'transforms[0].hash_bucket.num_buckets'",
            "expected an integer",
        ),
        (
            "transforms:\n  - hash_bucket: {column: a, num_buckets: 0}",
            "'transforms[0].hash_bucket.num_buckets'",
            "at least 1",
        ),
        (
            "transforms:\n  - fill_missing: {column: a}",
            "'transforms[0].fill_missing'",
            "exactly one of",
        ),
        (
            "transforms:\n  - fill_missing: {column: a, strategy: mode}",
            "'transforms[0].fill_missing.strategy'",
            "not one of",
        ),
        (
            "transforms:\n  - reshape: {column: a, shape: [2, 0]}",
            "'transforms[0].reshape.shape'",
            "positive",
        ),
        (
            "transforms:\n  - one_hot: {column: a, dtype: bool}",
            "'transforms[0].one_hot.dtype'",
            "not one of",
        ),
        (
            "transforms:\n  - min_max: {column: a, min: 1, max: 1}",
            "'transforms[0].min_max.max'",
            "above min",
        ),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, yaml, key, message):
    path = write_config(tmp_path, yaml)
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    text = str(err.value)
    assert text.startswith(f"{path}: key {key}"), text
    assert message in text


def test_a_valid_config_keeps_the_steps_as_written(tmp_path):
    path = write_config(
        tmp_path,
        "transform_artifacts: prev/\ntransforms:\n  - zscore: {column: fare}\n"
        "  - vocabulary: {column: company, top_k: 50, num_oov_buckets: 1}\n",
    )
    config = load_config(path, {})
    assert config.transform_artifacts == "prev/"
    assert [c.kind for c in config.transforms] == ["zscore", "vocabulary"]
    assert config.transforms[1].configured == {
        "column": "company",
        "top_k": 50,
        "num_oov_buckets": 1,
    }
    assert config.transforms[1].params["min_frequency"] == 1
    assert load_config(path, {"transform_artifacts": "other"}).transform_artifacts == "other"


@pytest.mark.parametrize(
    ("steps", "key", "message"),
    [
        (
            [{"zscore": {"column": "farex"}}],
            "transforms[0].zscore.column",
            "column 'farex' is not in the input (columns: fare, miles, company, hour)",
        ),
        (
            [{"zscore": {"column": "company"}}],
            "transforms[0].zscore.column",
            "column 'company' is string; zscore needs a number",
        ),
        (
            [{"drop": {"columns": ["fare"]}}, {"log1p": {"column": "fare"}}],
            "transforms[1].log1p.column",
            "'fare' is not in the input",
        ),
        ([{"lower": {"column": "hour"}}], "transforms[0].lower.column", "needs text"),
        ([{"cast": {"column": "hour", "to": "int99"}}], "transforms[0].cast.to", "unknown type"),
        (
            [{"cast": {"column": "hour", "to": "list<int8>"}}],
            "transforms[0].cast.to",
            "unknown type",
        ),
        ([{"one_hot": {"column": "hour"}}], "transforms[0].one_hot.depth", "needed"),
        (
            [{"fill_missing": {"column": "hour", "value": "x"}}],
            "transforms[0].fill_missing.value",
            "not a value of column 'hour'",
        ),
        ([{"clip": {"column": "hour", "min": 0.5}}], "transforms[0].clip.min", "not an integer"),
        (
            [{"filter": {"expr": "fare + 1"}}],
            "transforms[0].filter.expr",
            "a filter needs true/false",
        ),
        (
            [{"derive": {"name": "d", "expr": "company * 2"}}],
            "transforms[0].derive.expr",
            "cannot take (string, int64)",
        ),
        (
            [{"derive": {"name": "d", "expr": "open('x')"}}],
            "transforms[0].derive.expr",
            "unknown function 'open'",
        ),
        (
            [{"rename": {"columns": {"fare": "miles"}}}],
            "transforms[0].rename.columns.fare",
            "'miles' already exists",
        ),
        (
            [{"reshape": {"column": "fare", "shape": [2]}}],
            "transforms[0].reshape.column",
            "needs a list column",
        ),
        (
            [{"vocabulary": {"column": "fare"}}],
            "transforms[0].vocabulary.column",
            "needs text, binary or integers",
        ),
    ],
)
def test_schema_errors_at_construction(steps, key, message):
    with pytest.raises(StepError) as err:
        plan_of(steps, make_table(10).schema)
    assert str(err.value).startswith(f"{SOURCE}: key '{key}': "), str(err.value)
    assert message in str(err.value)


# ----------------------------------------------------------------------------- schema


def test_output_schema_feeds_plan_features():
    table = make_table(50)
    plan = plan_of(
        [
            {
                "vocabulary": {
                    "column": "company",
                    "output": "company_id",
                    "top_k": 3,
                    "num_oov_buckets": 2,
                }
            },
            {"one_hot": {"column": "company_id"}},
            {"split": {"column": "company", "output": "tokens"}},
            {"bucketize": {"column": "miles", "num_buckets": 4}},
            {"one_hot": {"column": "miles", "output": "miles_1h", "dtype": "int8"}},
            {"rename": {"columns": {"hour": "h"}}},
            {"derive": {"name": "ratio", "expr": "fare / miles"}},
            {"select": {"columns": ["company_id", "tokens", "miles", "miles_1h", "h", "ratio"]}},
        ],
        table.schema,
    )
    schema = plan.output_schema
    assert schema.field("company_id").type == pa.list_(pa.float32(), 5)  # top_k + oov buckets
    assert schema.field("miles_1h").type == pa.list_(pa.int8(), 4)
    assert schema.field("tokens").type == pa.list_(pa.string())
    assert schema.field("miles").type == pa.int64() and schema.field("ratio").type == pa.float64()
    specs = {s.name: s for s in plan_features(schema)}
    assert specs["company_id"].shape == (5,) and specs["tokens"].shape is None


# ----------------------------------------------------------------------------- passes


def test_independent_analyzers_share_one_pass_and_chains_need_more():
    schema = make_table(10).schema
    plan = plan_of(
        [
            {"zscore": {"column": "fare"}},
            {"vocabulary": {"column": "company"}},
            {"min_max": {"column": "hour"}},
            {"bucketize": {"column": "fare", "num_buckets": 3}},  # reads the z-scores
            {"bucketize": {"column": "miles", "num_buckets": 3}},
        ],
        schema,
    )
    assert plan.levels == {0: 1, 1: 1, 2: 1, 3: 2, 4: 1}
    assert plan.num_passes == 2
    assert plan.needed[2] == {0}


def test_a_filter_on_a_fitted_column_delays_every_later_analyzer():
    schema = make_table(10).schema
    plan = plan_of(
        [
            {"zscore": {"column": "fare", "output": "z"}},
            {"filter": {"expr": "z < 2"}},
            {"vocabulary": {"column": "company"}},
            {"rename": {"columns": {"z": "zz"}}},
            {"bucketize": {"column": "zz", "num_buckets": 3}},
        ],
        schema,
    )
    assert plan.levels == {0: 1, 2: 2, 4: 2}


def test_analyzers_see_the_data_as_the_steps_before_them_leave_it():
    table = make_table()
    steps = [
        {"filter": {"expr": "fare > 0"}},
        {"clip": {"column": "miles", "max": 5.0}},
        {"zscore": {"column": "miles", "output": "miles_z"}},
        {"bucketize": {"column": "miles_z", "num_buckets": 4}},  # second pass: needs the z-scores
        {"one_hot": {"column": "miles_z", "output": "miles_1h"}},  # would fail on raw floats
        {"fill_missing": {"column": "company", "strategy": "most_frequent"}},
        {"vocabulary": {"column": "company", "top_k": 3, "num_oov_buckets": 1}},
    ]
    plan = plan_of(steps, table.schema)
    assert plan.num_passes == 2
    batches = batches_of(table)
    fitted = fit(plan, batches)
    keep = table.filter(pa.compute.fill_null(pa.compute.greater(table.column("fare"), 0), False))
    miles = np.minimum(keep.column("miles").to_numpy(), 5.0)
    assert fitted[2]["count"] == len(miles)
    assert fitted[2]["mean"] == pytest.approx(miles.mean(), rel=1e-12)
    assert fitted[2]["std"] == pytest.approx(miles.std(), rel=1e-9)
    z = (miles - miles.mean()) / miles.std()
    expected = np.quantile(z, [0.25, 0.5, 0.75], method="inverted_cdf")
    assert fitted[3]["quantiles"] == pytest.approx(expected.tolist(), rel=1e-12)
    companies = [c for c in keep.column("company").to_pylist() if c is not None]
    top = max(sorted(set(companies)), key=companies.count)
    assert fitted[5]["value"] == top
    filled = [top if c is None else c for c in keep.column("company").to_pylist()]
    assert fitted[6]["values"] == sorted(set(filled), key=lambda c: (-filled.count(c), c))[:3]
    out = run(plan, batches, fitted)
    assert out.schema == plan.output_schema
    assert out.num_rows == len(miles)
    assert out.column("miles_z").to_pylist() == np.searchsorted(expected, z, side="left").tolist()


# ----------------------------------------------------------------------------- row errors


def test_a_failing_row_names_the_source_row_after_a_filter():
    table = pa.table({"a": pa.array(range(20)), "s": pa.array([str(i) for i in range(19)] + ["x"])})
    plan = plan_of(
        [{"filter": {"expr": "a >= 4"}}, {"cast": {"column": "s", "to": "int32"}}], table.schema
    )
    with pytest.raises(PreprocessError) as err:
        apply_steps(plan, TableBatch(table.slice(10), "in.csv", 10), {})
    assert str(err.value).startswith(
        f"in.csv: row 19: column 's': transforms[1].cast ({SOURCE}): Failed to parse string: 'x'"
    )
    assert isinstance(err.value, ConversionError)
    plan = plan_of(
        [{"filter": {"expr": "a != 1"}}, {"one_hot": {"column": "a", "depth": 5}}], table.schema
    )
    with pytest.raises(
        PreprocessError, match=r"in.csv: row 5: column 'a': transforms\[1\].one_hot .*id 5"
    ):
        apply_steps(plan, TableBatch(table, "in.csv", 0), {})


def test_encoder_errors_after_a_filter_name_the_source_row():
    table = pa.table({"a": pa.array([1, 2, 3, None, 5])})
    plan = plan_of([{"filter": {"expr": "a != 2 or is_null(a)"}}], table.schema)
    out = apply_steps(plan, TableBatch(table, "in.parquet", 100), {})
    specs = plan_features(out.table.schema, {"a": _fail_on_null()})
    with pytest.raises(ConversionError, match=r"in.parquet: row 103: column 'a': null value"):
        encode_table(out.table, specs, out.source, out.first_row, rows=out.rows)


def _fail_on_null():
    from transforms.encode.schema import ColumnOptions

    return ColumnOptions(null_policy="fail")


def test_overflow_in_a_derived_column_names_the_row():
    table = pa.table({"a": pa.array([1, 2, 2**62, 4])})
    plan = plan_of([{"derive": {"name": "b", "expr": "a * 4"}}], table.schema)
    with pytest.raises(
        PreprocessError, match=r"f: row 7: column 'b': transforms\[0\].derive .*overflow"
    ):
        apply_steps(plan, TableBatch(table, "f", 5), {})


# ----------------------------------------------------------------------------- artifacts


def test_artifacts_round_trip_and_must_match(tmp_path):
    table = pa.table(
        {
            "s": pa.array(["b", "a\nx", "b", "é", None, "a", "b"]),
            "raw": pa.array([b"\x00", b"\xff", b"\x00", None, b"z", b"z", b"z"]),
            "x": pa.array([1.0, 2.0, None, 4.0, 5.0, 6.0, 7.0]),
        }
    )
    steps = [
        {"vocabulary": {"column": "s", "num_oov_buckets": 2}},
        {"vocabulary": {"column": "raw", "output": "raw id"}},
        {"zscore": {"column": "x"}},
        {"bucketize": {"column": "x", "num_buckets": 2}},
    ]
    plan = plan_of(steps, table.schema)
    fitted = fit(plan, batches_of(table, 3))
    files = write_artifacts(fitted, plan, str(tmp_path))
    names = sorted(p.rsplit("/", 1)[1] for p in files)
    assert names == ["statistics.json", "vocabulary_00_s.txt", "vocabulary_01_raw_id.txt"]
    assert (tmp_path / "vocabulary_00_s.txt").read_bytes() == "b\na\né\n".encode()
    assert (tmp_path / "vocabulary_01_raw_id.txt").read_bytes() == b"z\n\x00\n\xff\n"
    stats = json.loads((tmp_path / "statistics.json").read_text())
    assert stats["analyzers"][0]["skipped_line_breaks"] == 1
    assert stats["analyzers"][3]["pass"] == 2
    assert check_artifacts(str(tmp_path), plan) == str(tmp_path)
    again = read_artifacts(str(tmp_path), plan)
    batches = batches_of(table, 3)
    assert run(plan, batches, again).equals(run(plan, batches, fitted))
    other = plan_of(
        [*steps[:2], {"zscore": {"column": "x", "output": "z"}}, steps[3]], table.schema
    )
    with pytest.raises(StepError, match=r"key 'transforms\[2\].zscore': .* holds no result"):
        check_artifacts(str(tmp_path), other)
    with pytest.raises(StepError, match=r"no statistics\.json"):
        check_artifacts(str(tmp_path / "nowhere"), plan)
    assert stats["analyzers"][3]["after"] == [
        {"step": 2, "kind": "zscore", "params": stats["analyzers"][2]["params"]}
    ]


def test_artifacts_fitted_after_other_steps_are_refused(tmp_path):
    """The same analyzer at the same place, but a step before it that changes its input
    changed: the stored statistics are of other values."""
    table = pa.table({"x": pa.array([1.0, 2.0, None, 4.0, 50.0]), "y": pa.array([1, 2, 3, 4, 5])})
    steps = [
        {"fill_missing": {"column": "x", "value": 0.0}},
        {"clip": {"column": "y", "max": 3}},  # does not touch x: not an input of the zscore
        {"zscore": {"column": "x"}},
    ]
    plan = plan_of(steps, table.schema)
    write_artifacts(fit(plan, batches_of(table, 2)), plan, str(tmp_path))
    unrelated = plan_of([steps[0], {"clip": {"column": "y", "max": 4}}, steps[2]], table.schema)
    assert check_artifacts(str(tmp_path), unrelated) == str(tmp_path)
    changed = plan_of(
        [{"fill_missing": {"column": "x", "value": 1.0}}, steps[1], steps[2]], table.schema
    )
    with pytest.raises(StepError, match=r"transforms\[2\].zscore'.*fitted this step after"):
        check_artifacts(str(tmp_path), changed)
