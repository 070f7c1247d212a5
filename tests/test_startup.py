"""Start-up of the command line without timing it: which modules each command imports (no Beam
or TensorFlow where the command does not need them), and the TensorFlow-free Example classes
`inspect` and `verify` decode records with. The times themselves: bench/startup.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import REPO, SAMPLE_PARQUET, run_cli_captured

from pipeline.verify.example_pb import Example
from transforms.write.tfrecord import read_records

HEAVY = ("apache_beam", "tensorflow")

# One process runs the commands in turn and, after each, says which of the heavy packages it
# has imported by then (so the later lists include the earlier ones).
_PROBE = """
import contextlib, io, json, sys
from pipeline.cli.main import main

def loaded():
    names = ("apache_beam", "tensorflow", "pyarrow", "numba", "yaml")
    return sorted(n for n in names if n in sys.modules)

seen = {}
for name, argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    seen[name] = {"code": code, "modules": loaded()}
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("startup") / "out"
    result = run_cli_captured(["convert", "--input", SAMPLE_PARQUET, "--output", out])
    assert result.code == 0, result.err
    return out


def probe(commands: list[tuple[str, list[str]]]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])


def test_help_inspect_verify_import_neither_beam_nor_tensorflow(output):
    (shard,) = sorted(output.glob("train-*"))
    seen = probe(
        [
            ("help", ["--help"]),
            ("convert help", ["convert", "--help"]),
            ("inspect", ["inspect", str(output)]),
            ("inspect shard", ["inspect", str(shard), "-n", "3"]),
            ("verify", ["verify", str(output)]),
        ]
    )
    assert {name: s["code"] for name, s in seen.items()} == dict.fromkeys(seen, 0)
    assert seen["help"]["modules"] == []  # nor pyarrow, numba or yaml
    assert seen["convert help"]["modules"] == []
    assert seen["inspect"]["modules"] == []  # nor pyarrow and numpy: the manifest is Arrow-free
    assert seen["inspect shard"]["modules"] == []
    assert not set(HEAVY) & set(seen["verify"]["modules"]), seen["verify"]


def test_example_classes_parse_as_tensorflow(output):
    """Every record of the sample's output: the same message as tf.train.Example's, and the
    same bytes when serialized again."""
    (shard,) = sorted(output.glob("train-*"))
    records = list(read_records(str(shard), 10_000))
    assert len(records) == 2000
    for record in records:
        ours, theirs = Example.FromString(record), tf.train.Example.FromString(record)
        again = ours.SerializeToString(deterministic=True)
        assert again == theirs.SerializeToString(deterministic=True)
        assert tf.train.Example.FromString(again) == theirs
        kinds = {k: f.WhichOneof("kind") for k, f in ours.features.feature.items()}
        assert kinds == {k: f.WhichOneof("kind") for k, f in theirs.features.feature.items()}


_PANDAS_PROBE = """
import sys
import numpy as np
import pyarrow as pa
from pipeline.cli.startup import pyarrow_without_pandas

pyarrow_without_pandas()
stamps = pa.array([1, None], pa.timestamp("us", "UTC"))
converted = (
    pa.array(np.arange(3)).to_numpy().tolist(),
    pa.array([1.5, None]).to_numpy(zero_copy_only=False).tolist(),
    str(stamps.to_numpy(zero_copy_only=False)[0]),
    stamps.to_pylist()[1],
)
after_conversions = "pandas" in sys.modules
import pandas  # an explicit import still works, and so does to_pandas
frame = pa.table({"a": [1, 2]}).to_pandas()
print(after_conversions, isinstance(frame, pandas.DataFrame), frame["a"].tolist(), converted)
"""


def test_pyarrow_converts_without_importing_pandas():
    """After `pyarrow_without_pandas()` pyarrow builds and converts arrays as before without
    importing pandas; pandas itself stays importable and `to_pandas()` works."""
    done = subprocess.run(
        [sys.executable, "-c", _PANDAS_PROBE], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "False True [1, 2] ([0, 1, 2], [1.5, nan], '1970-01-01T00:00:00.000001', None)"
    )


_GC_PROBE = """
import gc, json, sys
from pipeline.cli.startup import COMMAND_MODULES, import_paused

runs = []
gc.callbacks.append(lambda phase, info: phase == "start" and runs.append(info["generation"]))
caller_paused = sys.argv[1] == "paused"
if caller_paused:
    gc.disable()
import_paused(COMMAND_MODULES["convert"])
during = len(runs)
print(json.dumps({
    "imported": "pipeline.cli.convert" in sys.modules and "numba" in sys.modules,
    "collections_during": during,
    "enabled": gc.isenabled(),
    "frozen": gc.get_freeze_count(),
}))
"""


@pytest.mark.parametrize("caller", ["running", "paused"])
def test_imports_run_with_the_collector_paused_then_frozen(caller):
    """`convert`'s modules (numba and pyarrow among them) import with no collection at all; the
    collector runs again after, with what they made frozen; a collector the caller paused
    stays paused and nothing is frozen."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", _GC_PROBE, caller], cwd=REPO, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["imported"] is True
    assert seen["collections_during"] == 0
    if caller == "running":
        assert seen["enabled"] is True
        assert seen["frozen"] > 50_000  # the imported modules' objects
    else:
        assert seen["enabled"] is False
        assert seen["frozen"] == 0


def test_each_command_modules_import():
    """The modules named for each command exist (a renamed module would fail every run)."""
    from pipeline.cli.startup import COMMAND_MODULES

    for modules in COMMAND_MODULES.values():
        for name in modules:
            __import__(name)


_BLAS_PROBE = """
import contextlib, ctypes, glob, io, json, os, sys
from pathlib import Path
from pipeline.cli.main import main

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:], own_process=True)  # as the console script runs it
import numpy
libs = glob.glob(str(Path(numpy.__file__).parent.parent / "numpy.libs" / "libscipy_openblas*"))
threads = None
if libs:  # numpy's own wheel: ask its OpenBLAS how many threads it runs
    threads = ctypes.CDLL(libs[0]).scipy_openblas_get_num_threads64_()
print(json.dumps({"code": code, "env": os.environ.get("OPENBLAS_NUM_THREADS"), "threads": threads}))
"""


@pytest.mark.parametrize("preset", [None, "2"])
def test_the_command_process_runs_one_blas_thread_unless_told(preset, tmp_path):
    """The console script's process asks numpy's OpenBLAS for one thread before numpy loads (no
    threads spinning beside the job's); an OPENBLAS_NUM_THREADS the user set is kept."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("OPENBLAS_NUM_THREADS", None)
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    argv = ["plan", "--input", str(SAMPLE_PARQUET), "--output", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-c", _BLAS_PROBE, *argv], cwd=REPO, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["code"] == 0
    assert seen["env"] == (preset or "1")
    if seen["threads"] is not None:
        expected = 1 if preset is None else min(2, os.cpu_count() or 1)
        assert seen["threads"] == expected


def test_one_blas_thread_is_a_no_op_once_numpy_is_loaded():
    """Too late to matter once numpy has loaded OpenBLAS: the environment is left alone."""
    probe_code = (
        "import os, numpy\n"
        "from pipeline.cli.startup import one_blas_thread\n"
        "one_blas_thread()\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("OPENBLAS_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", probe_code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
