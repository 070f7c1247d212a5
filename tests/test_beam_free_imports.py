"""The plain modules import without Beam: a job run without Beam (or a command that reads a
local output) calls the functions the Beam transforms call, and must not pay Beam's import.

One fresh interpreter imports them all in turn and says after each whether `apache_beam` is
loaded, so a failure names the first module that pulled it in."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from conftest import REPO

# Beam modules under transforms/: the Beam transforms, and the writers built on Beam's windowed
# values; every other module there is plain.
BEAM_TRANSFORMS = {"transforms.write.rolling.beam"}

# Beam modules under pipeline/: the Beam engine's room; the tf.data reader imports TensorFlow
# (not Beam) and is left out for its import time. Every other module of pipeline/ is plain.
PIPELINE_BEAM = ("pipeline.engines.beam",)
PIPELINE_TENSORFLOW = {
    "pipeline.reader.spec",
    "pipeline.reader.sequence",
    "pipeline.reader.dataset",
    "pipeline.reader.images",
}

_PROBE = """
import importlib, json, sys
seen = []
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    seen.append([name, "apache_beam" in sys.modules])
print(json.dumps(seen))
"""


def _modules(package: str) -> list[str]:
    names = []
    for folder, dirs, files in os.walk(REPO / package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(files):
            if file.endswith(".py") and file != "__main__.py":
                relative = os.path.relpath(os.path.join(folder, file), REPO)[: -len(".py")]
                names.append(relative.replace(os.sep, ".").removesuffix(".__init__"))
    return names


# Modules of an optional extra, probed where the extra is installed: module -> its package.
PIPELINE_EXTRAS = {"pipeline.reader.torch": "torch"}


def pipeline_modules() -> list[str]:
    """Every module under pipeline/ but the Beam engine's and the tf.data reader's (and those
    of an extra that is not installed)."""
    missing = {
        m for m, package in PIPELINE_EXTRAS.items() if importlib.util.find_spec(package) is None
    }
    return [
        name
        for name in _modules("pipeline")
        if not name.startswith(PIPELINE_BEAM) and name not in PIPELINE_TENSORFLOW | missing
    ]


def transforms_modules() -> list[str]:
    """Every module under transforms/ but the Beam ones (beam.py and BEAM_TRANSFORMS)."""
    names = []
    for folder, dirs, files in os.walk(REPO / "transforms"):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(files):
            if not file.endswith(".py") or file == "beam.py":
                continue
            relative = os.path.relpath(os.path.join(folder, file), REPO)[: -len(".py")]
            name = relative.replace(os.sep, ".").removesuffix(".__init__")
            if name not in BEAM_TRANSFORMS:
                names.append(name)
    return names


def test_plain_modules_import_without_beam():
    modules = transforms_modules() + pipeline_modules()
    assert {"transforms.fs", "transforms.deadletter", "transforms.write.finalize"} <= set(modules)
    assert {"pipeline.cli.main", "pipeline.engines.inprocess", "pipeline.reader"} <= set(modules)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert [name for name, _ in seen] == modules
    first = next((name for name, beam in seen if beam), None)
    assert first is None, f"importing {first} imports apache_beam"
