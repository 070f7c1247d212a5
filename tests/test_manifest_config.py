"""The typed manifest, its `config` section (the job's effective config, read back as the same
JobConfig), and the options table both the flags and the config keys derive from."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import SAMPLE_CSV, read_manifest, run_cli

from pipeline.cli import main as cli
from pipeline.job.config import (
    OMITTED_AT_DEFAULT,
    ConfigError,
    config_from_json,
    config_to_json,
    load_config,
)
from pipeline.job.flags import OPTIONS, scalar_options
from pipeline.output.manifest import Manifest
from pipeline.output.manifest import read_manifest as read_typed

CONFIG = """
csv:
  null_values: [""]
  column_types: {fare: float64, company: string}
columns:
  fare: {keep_float64: true}
  trip_seconds: {null_policy: default, default: 0}
transforms:
  - fill_missing: {column: company, value: "(none)"}
  - hash_bucket: {column: company, output: company_bucket, num_buckets: 8}
splits: {train: 3, eval: 1}
split_key: trip_id
split_salt: s
batch_rows: 700
compression: zlib
max_bad_rows: 5
"""


def test_round_trip(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_config(str(path), {"input": [str(SAMPLE_CSV)], "output": "out"})
    data = json.loads(json.dumps(config_to_json(config)))
    again = config_from_json(data, "manifest.json")
    assert list(again.splits) == [("train", 3), ("eval", 1)]
    assert [s.params for s in again.transforms] == [s.params for s in config.transforms]
    assert dataclasses.replace(again, transforms=()) == dataclasses.replace(config, transforms=())


def test_the_job_writes_it_with_inputs_resolved(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "out"
    pattern = str(SAMPLE_CSV.parent / "*.csv")
    assert run_cli(["convert", "--input", pattern, "--output", out, "--config", path]) == 0
    section = read_manifest(out)["config"]
    assert section["input"] == [str(SAMPLE_CSV)] and section["format"] == "csv"
    assert section["splits"] == {"train": 3, "eval": 1} and section["compression"] == "zlib"
    config = config_from_json(section, "manifest.json")
    assert config.columns["fare"].keep_float64 and config.batch_rows == 700


def test_a_bad_section_names_the_key():
    with pytest.raises(ConfigError, match=r"manifest\.json: key 'splits\.a': expected a positive"):
        config_from_json({"input": ["x"], "output": "o", "splits": {"a": 0}}, "manifest.json")


# ----------------------------------------------------------------------------- typed manifest


def test_manifest_round_trips_through_json(tmp_path):
    out = tmp_path / "out"
    assert run_cli(["convert", "--input", SAMPLE_CSV, "--output", out, "--num-shards", "2"]) == 0
    data = read_manifest(out)
    manifest = Manifest.from_json(data, "manifest.json")
    assert manifest.to_json() == data  # every key, in the writer's order
    assert list(manifest.to_json()) == list(data)
    assert manifest.rows == 2000 and manifest.splits["train"].rows == 2000
    assert manifest.files() == list(data["splits"]["train"]["files"])
    assert manifest.tf_compression_type == "GZIP" and manifest.bad_row_count == 0
    assert manifest.sharding.num_shards == 2 and manifest.split.weights == {"train": 1}
    fare = next(f for f in manifest.features if f.name == "fare")
    assert fare.spec.kind == "float" and fare.null_count > 0 and fare.nullable
    assert read_typed(str(out)) == manifest


def test_manifest_of_an_older_writer_has_no_optional_sections():
    data = {
        "manifest_version": 1,
        "compression": "none",
        "rows": 0,
        "splits": {"train": {"rows": 0, "files": []}},
        "features": [],
    }
    manifest = Manifest.from_json(data)
    assert manifest.split is None and manifest.sharding is None and manifest.config is None
    assert manifest.bad_row_count == 0 and manifest.splits["train"].shards == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"manifest_version": 2}, "manifest_version 2 is not supported"),
        ({"rows": "many"}, "key 'rows' is missing or not a int"),
        ({"compression": "lz4"}, "compression 'lz4' is not one of"),
        ({"splits": {"train": {"rows": 1}}}, "key 'splits.train' needs 'rows' and a list"),
        ({"features": [{"name": "x"}]}, "a malformed entry"),
    ],
)
def test_a_malformed_manifest_names_the_key(change, message):
    data = {
        "manifest_version": 1,
        "compression": "gzip",
        "rows": 1,
        "splits": {"train": {"rows": 1, "files": ["train-00000-of-00001.tfrecord.gz"]}},
        "features": [],
        **change,
    }
    with pytest.raises(ValueError, match=message):
        Manifest.from_json(data, "out/manifest.json")


# ----------------------------------------------------------------------------- options


def test_every_scalar_config_key_is_declared_once_with_its_flag():
    parser = cli._parser()
    convert = parser._subparsers._group_actions[0].choices["convert"]
    dests = {a.dest for a in convert._actions}
    for option in OPTIONS:
        assert (option.key in dests) == option.flag, option.key
        if option.flag:
            assert "--" + option.key.replace("_", "-") in convert._option_string_actions
    scalars = scalar_options()
    assert set(scalars) == {o.key for o in OPTIONS if o.form in ("scalar", "bool")}
    # the config's JSON form (the manifest's config section) has a key per scalar option, but
    # those that act after the job (recorded=False: report), and options added later, which are
    # left out at their default (the output is unchanged)
    config = load_config(None, {"input": ["x.csv"], "output": "o"})
    recorded = {key for key, o in scalars.items() if o.recorded}
    assert recorded - set(OMITTED_AT_DEFAULT) <= set(config_to_json(config))
    left_out = (set(scalars) - recorded) | set(OMITTED_AT_DEFAULT)
    assert not left_out & set(config_to_json(config))
    set_all = {"input": ["x.csv"], "output": "o", "layout": "tfx", "stats": False, "index": True}
    set_all["schema"] = "unify"
    assert recorded <= set(config_to_json(load_config(None, set_all)))


def test_a_flag_and_its_config_key_agree(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("num_shards: 3\nshard_mb: 2\nsink: tfrecordio\n", encoding="utf-8")
    args = cli._parser().parse_args(
        ["convert", "--config", str(path), "--num-shards", "5", "--input", "a.csv"]
    )
    flags = {o.key: getattr(args, o.key) for o in OPTIONS if o.flag}
    config = load_config(args.config, {**flags, "output": "o"})
    assert config.num_shards == 5 and config.shard_mb == 2.0 and config.sink == "tfrecordio"
    with pytest.raises(ConfigError, match="key 'sink': 'x' is not one of"):
        load_config(None, {"input": ["a"], "output": "o", "sink": "x"})
