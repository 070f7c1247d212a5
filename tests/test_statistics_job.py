"""The job's statistics and schema files (`--stats`): listed in the manifest, equal to what the
records of each split give, parsed back by tensorflow_metadata; `--stats=false`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import SAMPLE_PARQUET, example_to_dict, read_manifest, run_cli
from google.protobuf import text_format
from stats_oracle import check_statistics, expected_statistics
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from transforms.encode.schema import FeatureSpec

REPO = Path(__file__).resolve().parents[1]
CONFIG = {
    "columns": {
        "fare": {"keep_float64": True},
        "trip_seconds": {"null_policy": "default", "default": 0},
        "pickup_grid": {"shape": [2, 2]},
    },
    "splits": {"train": 8, "eval": 2},
    "transforms": [{"vocabulary": {"column": "company", "output": "company_id"}}],
}


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("stats_job")
    config = work / "config.yaml"
    config.write_text(json.dumps(CONFIG))  # JSON is YAML
    out = work / "out"
    code = run_cli(["convert", "--input", SAMPLE_PARQUET, "--output", out, "--config", config])
    assert code == 0
    return out


def _records(out: Path, files: list[str]) -> list[dict]:
    dataset = tf.data.TFRecordDataset([str(out / f) for f in files], compression_type="GZIP")
    return [example_to_dict(tf.train.Example.FromString(r.numpy())) for r in dataset]


def test_statistics_per_split_equal_the_records(output: Path) -> None:
    manifest = read_manifest(output)
    assert manifest["statistics"] == {
        "train": "statistics/train/FeatureStats.pb",
        "eval": "statistics/eval/FeatureStats.pb",
    }
    specs = [FeatureSpec.from_json(f) for f in manifest["features"]]
    missing = dict.fromkeys((s.name for s in specs), 0)
    for split, path in manifest["statistics"].items():
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString((output / path).read_bytes())
        (dataset,) = stats.datasets
        assert dataset.name == split
        assert dataset.num_examples == manifest["splits"][split]["rows"]
        records = _records(output, manifest["splits"][split]["files"])
        check_statistics(dataset, expected_statistics(records, specs))
        for feature in dataset.features:
            common = getattr(feature, feature.WhichOneof("stats")).common_stats
            missing[feature.path.step[0]] += common.num_missing
    assert missing == {f["name"]: f["null_count"] for f in manifest["features"]}


def test_schema_from_the_manifest(output: Path) -> None:
    manifest = read_manifest(output)
    assert manifest["schema"] == "schema.pbtxt"
    schema = text_format.Parse((output / "schema.pbtxt").read_text(), schema_pb2.Schema())
    features = {f.name: f for f in schema.feature}
    assert list(features) == [f["name"] for f in manifest["features"]]
    nulls = {f["name"]: f["null_count"] for f in manifest["features"]}
    kinds = {"int64": schema_pb2.INT, "float": schema_pb2.FLOAT, "bytes": schema_pb2.BYTES}
    for entry in manifest["features"]:
        feature = features[entry["name"]]
        assert feature.type == kinds[entry["kind"]], entry["name"]
        assert (feature.presence.min_fraction == 1.0) == (nulls[entry["name"]] == 0)
    assert features["trip_id"].HasField("shape") and not features["trip_id"].shape.dim
    assert not features["tags"].HasField("shape") and not features["tags"].HasField("value_count")
    grid = features["pickup_grid"]
    if nulls["pickup_grid"]:
        assert (grid.value_count.min, grid.value_count.max) == (4, 4)
    else:
        assert [d.size for d in grid.shape.dim] == [2, 2]
    assert features["fare"].type == schema_pb2.BYTES  # keep_float64: one bytes value per row
    assert features["trip_seconds"].presence.min_fraction == 1.0  # nulls written as 0
    vocabulary = (output / "transform").glob("vocabulary_*company*.txt")
    values = next(vocabulary).read_text().split("\n")[:-1]
    (domain,) = schema.string_domain
    assert domain.name == "company_id" and list(domain.value) == values
    company_id = features["company_id"].int_domain
    assert (company_id.min, company_id.max, company_id.is_categorical) == (
        0,
        len(values) - 1,
        True,
    )
    assert features["company"].domain == "company_id"


def test_statistics_types_agree_with_the_schema(output: Path) -> None:
    """TFDV's validate_statistics compares each feature's statistics type with the schema's
    (STRING counts as BYTES): a keep_float64 feature is BYTES in both, with numeric statistics
    of the float64 values it holds."""
    manifest = read_manifest(output)
    schema = text_format.Parse((output / "schema.pbtxt").read_text(), schema_pb2.Schema())
    schema_types = {f.name: f.type for f in schema.feature}
    kinds = statistics_pb2.FeatureNameStatistics
    as_schema = {kinds.INT: schema_pb2.INT, kinds.FLOAT: schema_pb2.FLOAT}
    for split in manifest["splits"]:
        path = output / manifest["statistics"][split]
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(path.read_bytes())
        for feature in stats.datasets[0].features:
            name = feature.path.step[0]
            assert as_schema.get(feature.type, schema_pb2.BYTES) == schema_types[name], name
        fare = next(f for f in stats.datasets[0].features if f.path.step[0] == "fare")
        assert fare.type == kinds.BYTES and fare.WhichOneof("stats") == "num_stats"
        assert fare.num_stats.max > fare.num_stats.min > 0


def test_stats_false_writes_none(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["convert", "--input", SAMPLE_PARQUET, "--output", out, "--stats=false"]
    assert run_cli(args) == 0
    manifest = read_manifest(out)
    assert "statistics" not in manifest and not (out / "statistics").exists()
    assert manifest["schema"] == "schema.pbtxt"
    assert manifest["config"]["stats"] is False
