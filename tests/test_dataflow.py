"""The Dataflow path, offline: the Dockerfile agrees with the pinned versions and copies files
that exist, the Flex Template's parameters are the CLI's flags, and the real CLI builds the
Dataflow job in a dry run (container image or staged package, and the job's steps).

The clean-venv install of the worker requirements takes minutes: it runs with
TFRECORD_ETL_SLOW=1 only.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from conftest import REPO, SAMPLE_PARQUET, read_manifest
from google.protobuf import json_format
from packaging.requirements import Requirement

from pipeline.cli.main import _parser
from pipeline.engines.beam import dataflow
from pipeline.job.config import ConfigError

DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
SETUP_PY = (REPO / "setup.py").read_text(encoding="utf-8")
BEAM_VERSION = re.search(r'^BEAM_VERSION = "([^"]+)"', SETUP_PY, re.M).group(1)
IMAGE = "us-central1-docker.pkg.dev/example-project/etl/tfrecord-etl:0.1.0"
STEPS = {"ReadTable", "EncodeExamples", "WriteShards[train]", "CountRows", "WriteManifest"}
OFFLINE_ENV = {
    # Anything that tried the network would fail at once instead of waiting.
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "NO_GCE_CHECK": "True",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    ),  # this checkout, not an installed copy, whatever the working directory
}
DATAFLOW_DRY_RUN = [
    "--dry_run=True",
    "--no_auth",
    "--project=example-project",
    "--region=us-central1",
    "--temp_location=gs://some-bucket/tmp",
]
SLOW = pytest.mark.skipif(
    os.environ.get("TFRECORD_ETL_SLOW") != "1", reason="minutes; set TFRECORD_ETL_SLOW=1"
)


def _instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [
        line.split(None, 1)[1] for line in text.splitlines() if line.split(None, 1)[:1] == [name]
    ]


def _install_requires(extra: str | None = None) -> list[Requirement]:
    """setup.py's install_requires (or the requirements of one extra), with BEAM_VERSION
    substituted, without running setup.py."""
    call = next(
        node
        for node in ast.walk(ast.parse(SETUP_PY))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    )
    (requires,) = [k.value for k in call.keywords if k.arg == "install_requires"]
    if extra is not None:
        (extras,) = [k.value for k in call.keywords if k.arg == "extras_require"]
        (requires,) = [
            v for k, v in zip(extras.keys, extras.values, strict=True) if k.value == extra
        ]
    out = []
    for item in requires.elts:
        text = ast.unparse(item)
        text = text.removeprefix("f").strip("'\"").replace("{BEAM_VERSION}", BEAM_VERSION)
        out.append(Requirement(text))
    return out


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements-worker.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"requirements-worker.txt: {line!r} is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


# ----------------------------------------------------------------------------- the image


def test_dockerfile_beam_image_is_the_pinned_beam_version():
    sdk = [f for f in _instructions("FROM") if f.startswith("apache/beam_python")]
    assert sdk == [f"apache/beam_python3.11_sdk:{BEAM_VERSION}"]
    assert _instructions("FROM")[-1] == sdk[0]  # the final stage: the image that is shipped
    assert _pins()["apache-beam"] == BEAM_VERSION


def test_dockerfile_pythons_agree():
    python = re.search(r"beam_python(\d)\.(\d+)_sdk", DOCKERFILE).groups()
    launcher = re.search(r"python(\d)(\d+)-template-launcher-base", DOCKERFILE).groups()
    assert python == launcher == ("3", "11")


def test_dockerfile_copies_files_that_exist():
    sources = []
    for args in _instructions("COPY"):
        if args.startswith("--from="):
            continue
        *srcs, _dest = args.split()
        sources.extend(srcs)
    assert {"setup.py", "requirements-worker.txt", "pipeline", "transforms"} <= set(sources)
    for src in sources:
        assert (REPO / src).exists(), f"Dockerfile copies {src}, which does not exist"


def test_dockerfile_leaves_every_kernel_compiled_for_any_cpu():
    (run,) = _instructions("RUN")
    assert run.rstrip().endswith("cd / && python -m pipeline.job.warm")  # the installed copy
    assert "NUMBA_CPU_NAME=generic" in _instructions("ENV")
    # set before the build compiles: the cache is built for the CPU name the workers look up
    assert DOCKERFILE.index("ENV NUMBA_CPU_NAME=generic") < DOCKERFILE.index("RUN ")


def test_dockerfile_entrypoint_checks_and_flex_file():
    assert _instructions("ENTRYPOINT") == ['["/opt/apache/beam/boot"]']
    (run,) = _instructions("RUN")
    assert "-r requirements-worker.txt" in run and "--no-deps ." in run and "pip check" in run
    (workdir,) = _instructions("WORKDIR")
    (env,) = [e for e in _instructions("ENV") if e.startswith("FLEX_TEMPLATE_PYTHON_PY_FILE=")]
    py_file = env.split("=", 1)[1]
    assert py_file.startswith(workdir + "/")
    assert (REPO / py_file.removeprefix(workdir + "/")).is_file()
    assert any(
        a.endswith("/opt/google/dataflow/python_template_launcher")
        for a in _instructions("COPY")
        if a.startswith("--from=launcher")
    )


def test_worker_requirements_satisfy_setup_py():
    pins = _pins()
    # the package, and its azure extra (a job may read or write azfs:// on the workers)
    for req in [*_install_requires(), *_install_requires("azure")]:
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req.name} is not pinned in requirements-worker.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
        for extra in req.extras:  # apache-beam[tfrecord,gcp,aws] and [azure]: pinned too
            assert extra in {"tfrecord", "gcp", "aws", "azure"}
    assert "google-cloud-storage" in pins and "crcmod" in pins
    assert {"boto3", "botocore", "s3transfer"} <= set(pins)  # aws: s3://
    assert {"azure-storage-blob", "azure-core", "azure-identity"} <= set(pins)  # azure: azfs://


@SLOW
def test_worker_requirements_install_in_a_clean_venv(tmp_path):
    """What `docker build` runs, in a clean venv: pinned requirements, the package, pip check,
    then the installed CLI converts the sample."""
    src = tmp_path / "src"
    for args in _instructions("COPY"):
        if args.startswith("--from="):
            continue
        for name in args.split()[:-1]:
            target = src / name
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / name, target)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    run = {"cwd": src, "check": True, "timeout": 1800}
    subprocess.run([*pip, "install", "--no-cache-dir", "-r", "requirements-worker.txt"], **run)
    subprocess.run([*pip, "install", "--no-cache-dir", "--no-deps", "."], **run)
    subprocess.run([*pip, "check"], **run)
    out = tmp_path / "out"
    subprocess.run(
        [venv / "bin" / "tfrecord-etl", "convert", "--input", SAMPLE_PARQUET, "--output", out],
        cwd=tmp_path,
        check=True,
        timeout=600,
    )
    assert read_manifest(out)["rows"] == 2000


# ----------------------------------------------------------------------------- Flex Template


def test_flex_template_parameters_are_cli_flags():
    metadata = json.loads((REPO / "flex_template" / "metadata.json").read_text("utf-8"))
    params = metadata["parameters"]
    assert {"input", "output", "date"} <= {p["name"] for p in params}
    examples = {
        "num_shards": "4",
        "shard_mb": "64",
        "shuffle": "true",
        "shuffle_seed": "3",
        "compression_level": "2",
        "batch_rows": "1000",
        "date": "2026-12-01",
        "overwrite": "true",
        "format": "parquet",
        "compression": "gzip",
        "gzip_backend": "isal",
        "sink": "blocks",
        "layout": "tfx",
    }
    for param in params:
        assert param["label"] and param["helpText"], param["name"]
        assert param.get("isOptional", False) is (param["name"] not in ("input", "output"))
        value = examples.get(param["name"], "gs://b/x/{date}")
        for regex in param.get("regexes", []):
            assert re.fullmatch(regex, value), (param["name"], regex, value)
        # the launcher passes --name=value: the CLI must take it, not hand it to Beam
        args, unknown = _parser().parse_known_args(["convert", f"--{param['name']}={value}"])
        assert unknown == [], param["name"]
        assert getattr(args, param["name"]) not in (None, []), param["name"]


def test_flex_template_main_runs_convert(tmp_path):
    """The launcher's call, with the local runner: --name=value flags, date and overwrite."""
    out = tmp_path / "flex" / "{date}"
    proc = subprocess.run(
        [
            sys.executable,
            REPO / "flex_template" / "main.py",
            f"--input={SAMPLE_PARQUET}",
            f"--output={out}",
            "--runner=FnApiRunner",  # the launcher passes DataflowRunner (the default here)
            "--date=2026-12-01",
            "--num_shards=2",
            "--overwrite=false",
        ],
        cwd=tmp_path,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"  # a local runner finishes before run() returns
    manifest = read_manifest(tmp_path / "flex" / "2026-12-01")
    assert manifest["rows"] == 2000 and len(manifest["splits"]["train"]["files"]) == 2


def test_flex_template_main_defaults_to_dataflow_without_waiting(tmp_path):
    """As the launcher calls it (no --runner): a Dataflow job, handed over, not waited for."""
    proc = subprocess.run(
        [
            sys.executable,
            REPO / "flex_template" / "main.py",
            f"--input={SAMPLE_PARQUET}",
            f"--output={tmp_path}/out/{{date}}",
            "--date=2026-12-01",
            f"--sdk_container_image={IMAGE}",
            *DATAFLOW_DRY_RUN,
        ],
        cwd=tmp_path,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "dry_run" and summary["runner"] == "DataflowRunner"
    assert summary["output"] == f"{tmp_path}/out/2026-12-01"
    assert summary["job_name"].startswith("tfrecord-etl-2026-12-01-")
    assert summary["sdk_container_images"] == [IMAGE]


# ----------------------------------------------------------------------------- options


def test_fill_options_only_for_dataflow():
    options = PipelineOptions(["--runner=FnApiRunner"])
    assert dataflow.fill_dataflow_options(options, None) == []
    assert options.get_all_options()["setup_file"] is None


def test_fill_options_stages_the_project_setup_py():
    if dataflow.project_setup_file() is None:
        pytest.skip("the package is imported from an installed copy, not from this checkout")
    options = PipelineOptions(["--runner=DataflowRunner"])
    notes = dataflow.fill_dataflow_options(options, None)
    assert options.get_all_options()["setup_file"] == str(REPO / "setup.py")
    assert f"--setup_file={REPO / 'setup.py'}" in notes
    name = options.get_all_options()["job_name"]
    assert re.fullmatch(r"tfrecord-etl-\d{8}-\d{6}-\d{6}", name)


@pytest.mark.parametrize(
    "given", [f"--sdk_container_image={IMAGE}", "--setup_file=/x/setup.py", "--extra_package=a.whl"]
)
def test_fill_options_keeps_what_ships_the_code(given):
    options = PipelineOptions(["--runner=dataflow", given, "--job_name=mine"])
    assert dataflow.fill_dataflow_options(options, None) == []
    all_options = options.get_all_options()
    assert all_options["job_name"] == "mine"
    if "setup_file" not in given:
        assert all_options["setup_file"] is None


def test_fill_options_without_a_checkout_asks_for_an_image(monkeypatch):
    monkeypatch.setattr(dataflow, "project_setup_file", lambda: None)
    with pytest.raises(ConfigError, match="--sdk_container_image=IMAGE"):
        dataflow.fill_dataflow_options(PipelineOptions(["--runner=DataflowRunner"]), None)


def test_job_name_carries_the_run_date():
    import datetime

    options = PipelineOptions(["--runner=DataflowRunner", f"--sdk_container_image={IMAGE}"])
    dataflow.fill_dataflow_options(options, datetime.date(2026, 12, 1))
    name = options.get_all_options()["job_name"]
    assert name.startswith("tfrecord-etl-2026-12-01-") and len(name) <= 63


# ----------------------------------------------------------------------------- dry runs


def dry_run(tmp_path: Path, *extra: str) -> tuple[dict, beam_runner_api_pb2.Pipeline, dict]:
    """The real CLI, DataflowRunner, dry run, offline: (summary, pipeline proto, job message)."""
    job_file = tmp_path / "job.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "convert",
            "--input",
            str(SAMPLE_PARQUET),
            "--output",
            str(tmp_path / "out"),
            "--runner=DataflowRunner",
            *DATAFLOW_DRY_RUN,
            f"--dataflow_job_file={job_file}",
            *extra,
        ],
        cwd=tmp_path,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    document = json.loads(job_file.read_text(encoding="utf-8"))
    pipeline = json_format.ParseDict(document["pipeline"], beam_runner_api_pb2.Pipeline())
    return summary, pipeline, document["job"]


def top_level_steps(pipeline: beam_runner_api_pb2.Pipeline) -> set[str]:
    transforms = pipeline.components.transforms
    return {
        transforms[child].unique_name
        for root in pipeline.root_transform_ids
        for child in transforms[root].subtransforms
    }


def environment(pipeline: beam_runner_api_pb2.Pipeline) -> tuple[str, dict[str, str]]:
    """(container image, staged name -> local file) of the job's one environment."""
    (env,) = pipeline.components.environments.values()
    assert env.urn == "beam:env:docker:v1"
    image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
    staged = {}
    for dep in env.dependencies:
        role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
        path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
        staged[role.staged_name] = path
    return image, staged


def test_dry_run_stages_the_project_package(tmp_path):
    """No image given: the CLI stages the project's setup.py; the default Beam image runs it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"splits": {}}', encoding="utf-8")
    summary, pipeline, job = dry_run(tmp_path, "--overwrite")
    assert (out / "manifest.json").read_text(encoding="utf-8") == '{"splits": {}}'  # untouched
    image, staged = environment(pipeline)
    assert image.endswith(f"/beam_python3.11_sdk:{BEAM_VERSION}")
    assert "workflow.tar.gz" in staged  # the sdist Beam built from setup.py
    sdist = Path(staged["workflow.tar.gz"])
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"setup.py", "pipeline/cli/main.py", "transforms/encode/records.py"} <= names
    if sdist.parent.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(sdist.parent, ignore_errors=True)  # Beam leaves its staging dir behind
    assert STEPS <= top_level_steps(pipeline)
    assert job["type"] == "JOB_TYPE_BATCH" and job["name"].startswith("tfrecord-etl-")
    assert summary["status"] == "dry_run" and summary["exit_code"] == 0
    assert summary["runner"] == "DataflowRunner" and summary["job_name"] == job["name"]
    assert "workflow.tar.gz" in summary["staged"] and STEPS <= set(summary["steps"])


def test_dry_run_with_a_container_image(tmp_path):
    """An image that has the package: it is the workers' image, and nothing is built."""
    summary, pipeline, _ = dry_run(tmp_path, f"--sdk_container_image={IMAGE}", "--job_name=etl-1")
    image, staged = environment(pipeline)
    assert image == IMAGE
    assert "workflow.tar.gz" not in staged
    for path in staged.values():
        if Path(path).parent.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(Path(path).parent, ignore_errors=True)
    assert STEPS <= top_level_steps(pipeline)
    assert summary["sdk_container_images"] == [IMAGE] and summary["job_name"] == "etl-1"
    assert not (tmp_path / "out").exists()  # nothing written
