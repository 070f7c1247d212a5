"""Grouped SequenceExamples on Beam's DaskRunner against a real Dask cluster on 127.0.0.1 (the
cluster of tests/test_dask.py): the spill by bucket, its GroupByKey of references and the
per-bucket encoder with an output per split give the local runner's records. Slow tests only
(TFRECORD_ETL_SLOW=1): the cluster takes about 20 s to start."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from conftest import REPO, run_cli_captured
from test_dask import SLOW, cluster, dask_args  # noqa: F401 (cluster: the fixture)


def split_records(out: Path) -> dict[str, collections.Counter]:
    """Per split, its records as a multiset."""
    import tensorflow as tf

    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    kind = manifest["tf_compression_type"]
    records = {}
    for name, split in manifest["splits"].items():
        files = [str(out / f) for f in split["files"]]
        records[name] = collections.Counter(
            tf.data.TFRecordDataset(files, kind).as_numpy_iterator()
        )
    return records


@SLOW
def test_grouped_sequences_on_dask_equal_the_local_runner(cluster, tmp_path):  # noqa: F811
    config = REPO / "configs" / "taxi_sequence.yaml"
    source = REPO / "sample" / "trips.parquet"
    outputs = {}
    for where, extra in (("local", []), ("dask", dask_args(cluster))):
        out = tmp_path / where
        args = ["convert", "--config", config, "--input", source, "--output", out, *extra]
        result = run_cli_captured(args)
        assert result.code == 0, result.err
        outputs[where] = split_records(out)
    assert outputs["dask"] == outputs["local"]
    assert sum(sum(c.values()) for c in outputs["local"].values()) == 6  # the sample's companies
