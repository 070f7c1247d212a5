"""Runner options the CLI fills in, and what a Dataflow dry run built.

Dataflow workers need this project's code: either a container image that has it installed
(`--sdk_container_image`, built from the Dockerfile) or a package Beam builds and stages
(`--setup_file`). When neither is given and the job runs from a source checkout, the project's
own setup.py is staged. A dry run (`--dry_run=True`) builds the job without submitting it; its
job message and Beam pipeline proto can be written to `--dataflow_job_file` for inspection.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.portability.api import beam_runner_api_pb2
from google.protobuf import json_format

from pipeline.job.errors import ConfigError

__all__ = [
    "describe_dry_run",
    "fill_dataflow_options",
    "is_dataflow",
    "is_dry_run",
    "project_setup_file",
    "runner_name",
    "write_job_file",
]

_SETUP_FILE = Path(__file__).resolve().parents[3] / "setup.py"  # pipeline/engines/beam/ -> the root
_STAGING_ROLE = "beam:artifact:role:staging_to:v1"


def runner_name(options: PipelineOptions) -> str:
    """The runner's name as given (`DataflowRunner`, `dataflow`, ...), or '' when unset."""
    return str(options.view_as(StandardOptions).runner or "")


def is_dataflow(options: PipelineOptions) -> bool:
    name = runner_name(options).lower().removesuffix("runner")
    return name in ("dataflow", "testdataflow")


def is_dry_run(options: PipelineOptions) -> bool:
    """As DataflowRunner reads `--dry_run`: any non-empty value is a dry run."""
    return bool(options.view_as(TestOptions).dry_run)


def project_setup_file() -> str | None:
    """This project's setup.py when running from a source checkout (None when installed)."""
    if _SETUP_FILE.is_file() and 'name="tfrecord-etl"' in _SETUP_FILE.read_text("utf-8"):
        return str(_SETUP_FILE)
    return None


def _job_name(date: datetime.date | None) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S-%f")
    day = f"{date.isoformat()}-" if date else ""
    return re.sub(r"[^-a-z0-9]", "", f"tfrecord-etl-{day}{now}")[:63]


def fill_dataflow_options(options: PipelineOptions, date: datetime.date | None) -> list[str]:
    """Fill in what a Dataflow job needs and was not given; returns one note per filled option.

    - the code: `--setup_file` = this project's setup.py, unless a container image, a setup
      file or extra packages already ship it (an error when installed without a checkout);
    - `--job_name`: tfrecord-etl-[DATE-]UTC-TIMESTAMP, so scheduled runs are easy to find.
    """
    if not is_dataflow(options):
        return []
    notes = []
    setup = options.view_as(SetupOptions)
    image = options.view_as(WorkerOptions).sdk_container_image
    if not (image or setup.setup_file or setup.extra_packages):
        found = project_setup_file()
        if found is None:
            raise ConfigError(
                "DataflowRunner: workers need this package; pass --sdk_container_image=IMAGE "
                "(built from the Dockerfile) or --setup_file=PATH/TO/setup.py"
            )
        setup.setup_file = found
        notes.append(f"--setup_file={found}")
    cloud = options.view_as(GoogleCloudOptions)
    if not cloud.job_name:
        cloud.job_name = _job_name(date)
        notes.append(f"--job_name={cloud.job_name}")
    return notes


def _pipeline_proto(result: Any) -> beam_runner_api_pb2.Pipeline:
    job = getattr(result, "job", None)
    if job is None or not hasattr(job, "proto_pipeline"):
        raise ValueError("not the result of a Dataflow dry run (no job was built)")
    return job.proto_pipeline


def describe_dry_run(result: Any) -> dict[str, Any]:
    """The job a dry run built: name, container images, staged files and top-level steps."""
    proto = _pipeline_proto(result)
    transforms = proto.components.transforms
    steps = [
        transforms[child].unique_name
        for root in proto.root_transform_ids
        for child in transforms[root].subtransforms
    ]
    images, staged = [], []
    for env in proto.components.environments.values():
        images.append(beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image)
        for dep in env.dependencies:
            if dep.role_urn == _STAGING_ROLE:
                role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
                staged.append(role.staged_name)
    return {
        "job_name": result.job.proto.name,
        "sdk_container_images": sorted(set(images)),
        "staged": sorted(set(staged)),
        "steps": sorted(steps),
    }


def write_job_file(path: str, result: Any) -> None:
    """Write the dry run's Dataflow job message and Beam pipeline proto to `path` as JSON."""
    proto = _pipeline_proto(result)
    document = {
        "job": json_format.MessageToDict(result.job.proto._pb),
        "pipeline": json_format.MessageToDict(proto),
    }
    with FileSystems.create(path) as f:
        f.write(json.dumps(document, indent=1, sort_keys=True).encode("utf-8"))
