"""Shared fixtures and helpers for the writer-side tests.

- `peer_data`: a writable copy of the TFX Chicago taxi data (real files written by another
  project); env TFRECORD_ETL_PEER_DATA points at another copy; skipped when absent.
- `run_cli(args) -> int`: `tfrecord-etl <args>` in this process.
- `run_cli_captured(args) -> CliResult`: the same, with stdout and stderr captured (usable from
  module-scoped fixtures, where `capsys` is not available).
- `read_output(dir) -> list[dict]`: every record of a finished output, parsed by TensorFlow.
- `reference_rows(table)`: what each row's Example must hold, computed in plain Python from the
  table's values (the oracle for whole-job tests); `canonical(row)` makes rows hashable.
- `plan_specs`, `encode_rows`, `decode_rows`: a table through `plan_features` + `encode_table`
  in memory (shapes of nested lists inferred from the table, as the job does at plan time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import io
import itertools
import json
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import settings

from pipeline.cli.main import main as cli_main
from transforms.encode.columns import leaf_array
from transforms.encode.lists import infer_shape
from transforms.encode.records import encode_table
from transforms.encode.schema import (
    ColumnOptions,
    FeatureSpec,
    nested_list_columns,
    plan_features,
)

# Property tests search at random by default; .ci/run sets HYPOTHESIS_PROFILE=ci, a fixed search,
# so whether a change lands does not depend on the examples one run happens to draw.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "sample"
SAMPLE_PARQUET = SAMPLE_DIR / "trips.parquet"
SAMPLE_CSV = SAMPLE_DIR / "trips.csv"
PEER_DATA_ENV = "TFRECORD_ETL_PEER_DATA"
DEFAULT_PEER_DATA = REPO.parent / "shared" / "peer-data" / "tfx-chicago-taxi"

# The object-store tests' shared fixtures (splits, local_sample).
pytest_plugins = ("object_store",)

# pytest-xdist's `-n auto` (pyproject.toml): the cores this process may use, at most 4 (each
# worker holds TensorFlow, Beam and numba, 0.8 GB after their imports).
MAX_TEST_WORKERS = 4


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (`-p no:xdist -o addopts=-ra`)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(len(os.sched_getaffinity(0)), MAX_TEST_WORKERS))


# ----------------------------------------------------------------------------- records


def feature_values(feature: tf.train.Feature) -> list[Any] | None:
    """The values of one Feature as Python objects; None for an empty `Feature {}`."""
    kind = feature.WhichOneof("kind")
    if kind is None:
        return None
    return list(getattr(feature, kind).value)


def example_to_dict(example: tf.train.Example) -> dict[str, list[Any] | None]:
    """name -> list of values (int, float or bytes); an absent feature has no key."""
    return {name: feature_values(f) for name, f in example.features.feature.items()}


def ragged_to_list(value: tf.RaggedTensor) -> list[Any]:
    """`value.to_list()`, from its row splits in numpy: TensorFlow's own slices a tensor per row
    below the first ragged level (seconds for a few hundred nested rows)."""
    rows = value.flat_values.numpy().tolist()
    for splits in reversed(value.nested_row_splits):
        s = splits.numpy().tolist()
        rows = [rows[a:b] for a, b in itertools.pairwise(s)]
    return rows


def read_manifest(output_dir: str | os.PathLike) -> dict[str, Any]:
    return json.loads((Path(output_dir) / "manifest.json").read_text(encoding="utf-8"))


def read_raw_records(output_dir: str | os.PathLike) -> list[bytes]:
    """Serialized records of every shard the manifest lists, in file order."""
    manifest = read_manifest(output_dir)
    files = [str(Path(output_dir) / f) for f in manifest["splits"]["train"]["files"]]
    dataset = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
    return list(dataset.as_numpy_iterator())


def read_output(output_dir: str | os.PathLike) -> list[dict[str, list[Any] | None]]:
    """Every record of a finished output as a dict name -> values (absent features: no key)."""
    return [example_to_dict(tf.train.Example.FromString(r)) for r in read_raw_records(output_dir)]


# ----------------------------------------------------------------------------- reference


def _python_values(arr: pa.Array) -> list[Any]:
    """Python values of a column; temporal values as the integers the contract says."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _python_values(arr.dictionary_decode())
    if pa.types.is_timestamp(t):
        return arr.cast(pa.int64()).to_pylist()  # ticks in the column's unit
    if pa.types.is_date32(t):
        return arr.cast(pa.int32()).to_pylist()  # days
    if pa.types.is_date64(t):
        return [None if v is None else v // 86_400_000 for v in arr.cast(pa.int64()).to_pylist()]
    return arr.to_pylist()


def _flat(value: Any, t: pa.DataType) -> list[Any]:
    """One row's values of a leaf, as the Example holds them (lists flattened row-major)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [x for item in value for x in _flat(item, t.value_type)]
    if isinstance(value, bool):
        return [int(value)]
    if isinstance(value, float):
        return [float(np.float32(value))]  # float_list holds float32
    if isinstance(value, str):
        return [value.encode("utf-8")]
    if isinstance(value, decimal.Decimal):
        return [format(value, "f").encode("ascii")]
    return [value]


def _add_leaves(rows: list[dict[str, list[Any]]], name: str, arr: pa.Array) -> None:
    if pa.types.is_struct(arr.type):
        valid = arr.is_valid().to_pylist()
        for i in range(arr.type.num_fields):
            child = arr.field(i)
            masked = pa.array(
                [v if ok else None for v, ok in zip(child.to_pylist(), valid, strict=True)],
                child.type,
            )
            _add_leaves(rows, f"{name}.{arr.type.field(i).name}", masked)
        return
    for row, value in zip(rows, _python_values(arr), strict=True):
        if value is not None:
            row[name] = _flat(value, arr.type)


def reference_rows(table: pa.Table) -> list[dict[str, list[Any]]]:
    """Per row: feature name -> values; a null has no entry (null_policy omit)."""
    rows: list[dict[str, list[Any]]] = [{} for _ in range(table.num_rows)]
    for name in table.column_names:
        _add_leaves(rows, name, table.column(name).combine_chunks())
    return rows


def canonical(row: dict[str, list[Any] | None]) -> tuple:
    """A hashable form of a row dict, for comparing multisets of records."""
    return tuple(sorted((k, None if v is None else tuple(v)) for k, v in row.items()))


# ----------------------------------------------------------------------------- in memory


def column_options(columns: dict[str, Any] | None) -> dict[str, ColumnOptions]:
    """Config-style `columns:` mappings (or ColumnOptions) -> ColumnOptions."""
    out = {}
    for name, opts in (columns or {}).items():
        if not isinstance(opts, ColumnOptions):
            opts = dict(opts)
            if opts.get("shape") is not None:
                opts["shape"] = tuple(opts["shape"])
            opts = ColumnOptions(**opts)
        out[name] = opts
    return out


def plan_specs(table: pa.Table, columns: dict[str, Any] | None = None) -> list[FeatureSpec]:
    """The feature specs the job would plan for `table` (nested list shapes from its data)."""
    options = column_options(columns)
    shapes = {}
    for name, path in nested_list_columns(table.schema):
        if name in options and options[name].shape is not None:
            continue
        shape = infer_shape(leaf_array(table, path))
        if shape is not None:
            shapes[name] = shape
    return plan_features(table.schema, options, shapes)


def encode_rows(
    table: pa.Table,
    columns: dict[str, Any] | None = None,
    *,
    source: str = "input.parquet",
    first_row: int = 0,
    framed: bool = False,
) -> list[bytes]:
    """`table` through plan + encode_table: one serialized record per row."""
    batch, stats = encode_table(table, plan_specs(table, columns), source, first_row, framed)
    assert batch.num_records == table.num_rows == stats.rows
    assert batch.framed is framed
    bounds = batch.offsets.tolist()
    return [bytes(batch.buffer[a:b]) for a, b in itertools.pairwise(bounds)]


def decode_rows(
    table: pa.Table, columns: dict[str, Any] | None = None
) -> list[dict[str, list[Any] | None]]:
    """`table` through plan + encode_table, each record parsed back by TensorFlow."""
    return [example_to_dict(tf.train.Example.FromString(r)) for r in encode_rows(table, columns)]


# ----------------------------------------------------------------------------- CLI


@dataclasses.dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def _argv(args: Sequence[Any]) -> list[str]:
    return [str(a) for a in args]


def run_cli(args: Sequence[Any]) -> int:
    """Run `tfrecord-etl <args>` in this process; returns the exit code."""
    return cli_main(_argv(args))


def run_cli_captured(args: Sequence[Any]) -> CliResult:
    """Run `tfrecord-etl <args>` in this process with stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(_argv(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(name="run_cli", scope="session")
def run_cli_fixture() -> Callable[[Sequence[Any]], int]:
    return run_cli


@pytest.fixture(name="run_cli_captured", scope="session")
def run_cli_captured_fixture() -> Callable[[Sequence[Any]], CliResult]:
    return run_cli_captured


@pytest.fixture(name="read_output", scope="session")
def read_output_fixture() -> Callable[[str | os.PathLike], list[dict[str, Any]]]:
    return read_output


# ----------------------------------------------------------------------------- peer data


def peer_data_source() -> Path:
    """Where the peer data lives (env override first)."""
    override = os.environ.get(PEER_DATA_ENV)
    return Path(override) if override else DEFAULT_PEER_DATA


@pytest.fixture(scope="module")
def peer_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of the TFX Chicago taxi peer data (data.csv, data.parquet, ...)."""
    source = peer_data_source()
    if not (source / "data.csv").is_file():
        pytest.skip(
            f"peer data not found at {source} (set {PEER_DATA_ENV} to the tfx-chicago-taxi "
            "directory to run these tests)"
        )
    target = tmp_path_factory.mktemp("peer-data") / source.name
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target
