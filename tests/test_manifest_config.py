"""The manifest's `config` section: the job's effective config, read back as the same JobConfig."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import SAMPLE_CSV, read_manifest, run_cli

from pipeline.config import ConfigError, config_from_json, config_to_json, load_config

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
