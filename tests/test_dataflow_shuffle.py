"""The spilling grouped write on Dataflow, offline: the real CLI builds and validates the job with
`--shuffle` in a dry run, and the shard step still groups by shard (ToShards -> GroupByShard ->
WriteShard), with only references to spill files between them."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from apache_beam.portability.api import beam_runner_api_pb2
from test_dataflow import IMAGE, dry_run, environment, top_level_steps


def _names(pipeline: beam_runner_api_pb2.Pipeline) -> set[str]:
    return {t.unique_name for t in pipeline.components.transforms.values()}


def test_dry_run_of_a_shuffle_builds_the_grouped_write(tmp_path):
    summary, pipeline, job = dry_run(
        tmp_path, "--shuffle", "--num-shards", "3", f"--sdk_container_image={IMAGE}"
    )
    image, staged = environment(pipeline)
    for path in staged.values():  # Beam leaves its staging dir behind
        if Path(path).parent.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(Path(path).parent, ignore_errors=True)
    assert image == IMAGE
    assert summary["status"] == "dry_run" and summary["exit_code"] == 0
    assert job["type"] == "JOB_TYPE_BATCH"
    assert "WriteShards[train]" in top_level_steps(pipeline)
    names = _names(pipeline)
    for step in ("ToShards", "GroupByShard", "WriteShard", "Finalize"):
        assert f"WriteShards[train]/{step}" in names, sorted(n for n in names if "Write" in n)
    group = next(
        t
        for t in pipeline.components.transforms.values()
        if t.unique_name == "WriteShards[train]/GroupByShard"
    )
    assert group.spec.urn == "beam:transform:group_by_key:v1"
    assert not (tmp_path / "out").exists()  # nothing written, no spill file
