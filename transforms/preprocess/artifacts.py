"""Analyzer results as files beside the records, and read back to be applied again.

<output>/transform/
  statistics.json                  every analyzer: its step, parameters and fitted values
  vocabulary_<step>_<column>.txt   one value per line, most frequent first (line i is id i)

A later run with `--transform-artifacts DIR` (an output directory or its transform/) applies
these results instead of fitting them again. Each analyzer step of the new config must match
an entry of the same position, step name and parameters, fitted after the same steps (every
earlier step that changes the rows or the values it reads, with its parameters), else the job
is refused at construction: a changed filter or fill before a zscore means other statistics.
Files are written and read through Beam's FileSystems (local, gs://, ...). A vocabulary file
the statistics file names must lie in its directory (no '..', absolute path or scheme): it is
checked before anything is opened (transforms/confine.py).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from transforms.confine import check_inside
from transforms.fs import FileSystems
from transforms.preprocess.chain import PreprocessPlan
from transforms.preprocess.fitted_steps import VocabularyStep
from transforms.preprocess.spec import StepError

__all__ = [
    "ARTIFACTS_VERSION",
    "STATISTICS_NAME",
    "TRANSFORM_DIR",
    "check_artifacts",
    "manifest_section",
    "read_artifacts",
    "statistics",
    "transform_dir",
    "write_artifacts",
]

TRANSFORM_DIR = "transform"
STATISTICS_NAME = "statistics.json"
ARTIFACTS_VERSION = 1
_IN_FILES = ("values", "frequencies")  # kept in the vocabulary file, not in the JSON


def transform_dir(output_dir: str) -> str:
    return FileSystems.join(output_dir, TRANSFORM_DIR)


def _vocabulary_name(plan: PreprocessPlan, index: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", plan.steps[index].output)
    return f"vocabulary_{index:02d}_{safe}.txt"


def _json_params(params: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(dict(params)))


def _inputs(plan: PreprocessPlan, i: int) -> list[dict[str, Any]]:
    """The steps the analyzer of step `i` was fitted after, as {"step", "kind", "params"}."""
    return [
        {
            "step": j,
            "kind": plan.steps[j].config.kind,
            "params": _json_params(plan.steps[j].config.params),
        }
        for j in plan.inputs_of(i)
    ]


def statistics(plan: PreprocessPlan, fitted: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The statistics file's content (JSON-able)."""
    entries = []
    for i in sorted(plan.levels):
        step = plan.steps[i]
        entry = {
            "step": i,
            "key": step.config.key(),
            "kind": step.config.kind,
            "params": _json_params(step.config.params),
            "column": step.column,
            "output": step.output,
            "pass": plan.levels[i],
            "after": _inputs(plan, i),
        }
        entry.update({k: v for k, v in fitted[i].items() if k not in _IN_FILES})
        if isinstance(step, VocabularyStep):
            entry["file"] = _vocabulary_name(plan, i)
        entries.append(entry)
    return {"artifacts_version": ARTIFACTS_VERSION, "analyzers": entries}


def _write(path: str, data: bytes, mime_type: str) -> None:
    with FileSystems.create(path, mime_type=mime_type) as f:
        f.write(data)


def _vocabulary_bytes(values: list[Any]) -> bytes:
    lines = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
    return b"".join(line + b"\n" for line in lines)


def write_artifacts(
    fitted: Mapping[int, Mapping[str, Any]], plan: PreprocessPlan, directory: str
) -> list[str]:
    """Write the statistics file and every vocabulary under `directory`; returns their paths."""
    written = []
    for i in sorted(plan.levels):
        if isinstance(plan.steps[i], VocabularyStep):
            path = FileSystems.join(directory, _vocabulary_name(plan, i))
            _write(path, _vocabulary_bytes(fitted[i]["values"]), "text/plain")
            written.append(path)
    path = FileSystems.join(directory, STATISTICS_NAME)
    text = json.dumps(statistics(plan, fitted), indent=2)
    _write(path, text.encode("utf-8"), "application/json")
    return [path, *written]


def _resolve(directory: str) -> str:
    for candidate in (directory, FileSystems.join(directory, TRANSFORM_DIR)):
        if FileSystems.exists(FileSystems.join(candidate, STATISTICS_NAME)):
            return candidate
    raise StepError(
        f"--transform-artifacts {directory}: no {STATISTICS_NAME} there or in "
        f"{TRANSFORM_DIR}/ (expected a previous output directory or its {TRANSFORM_DIR}/)"
    )


def _read_json(path: str) -> dict[str, Any]:
    with FileSystems.open(path) as f:
        data = json.loads(f.read().decode("utf-8"))
    if data.get("artifacts_version") != ARTIFACTS_VERSION:
        raise StepError(
            f"{path}: artifacts_version {data.get('artifacts_version')} is not supported"
        )
    return data


def check_artifacts(directory: str, plan: PreprocessPlan) -> str:
    """Check that `directory` holds a result for every analyzer of `plan`; returns the
    directory holding the statistics file. Raises StepError naming the step that does not match."""
    if not plan.levels:
        raise StepError(f"--transform-artifacts {directory}: the config has no analyzer step")
    resolved = _resolve(directory)
    path = FileSystems.join(resolved, STATISTICS_NAME)
    entries = {e["step"]: e for e in _read_json(path)["analyzers"]}
    for i in sorted(plan.levels):
        step = plan.steps[i]
        entry = entries.get(i)
        expected = {"kind": step.config.kind, "params": _json_params(step.config.params)}
        if entry is None or {k: entry.get(k) for k in expected} != expected:
            found = None if entry is None else {k: entry.get(k) for k in expected}
            raise StepError(
                f"{step.config.source}: key '{step.config.key()}': {path} holds no result "
                f"for this step (expected {expected} at step {i}, found {found})"
            )
        after = _inputs(plan, i)
        if entry.get("after") != after:
            raise StepError(
                f"{step.config.source}: key '{step.config.key()}': {path} fitted this step "
                f"after other steps (fitted after {entry.get('after')}, the config has {after}); "
                "its statistics would not fit these values: fit it again"
            )
        if "file" in entry and not FileSystems.exists(_vocabulary_path(resolved, path, entry)):
            raise StepError(f"{path}: step {i}: {entry['file']} is missing")
    return resolved


def _vocabulary_path(directory: str, statistics_path: str, entry: Mapping[str, Any]) -> str:
    """The vocabulary file an entry names, inside `directory`; StepError naming the statistics
    file, the step and the path when the name would leave it."""
    try:
        name = check_inside(entry["file"], statistics_path, f"analyzers[step {entry['step']}].file")
    except ValueError as err:
        raise StepError(str(err)) from err
    return FileSystems.join(directory, name)


def read_artifacts(directory: str, plan: PreprocessPlan) -> dict[int, dict[str, Any]]:
    """The fitted results a previous run wrote (`directory` as `check_artifacts` returns it)."""
    path = FileSystems.join(directory, STATISTICS_NAME)
    entries = {e["step"]: e for e in _read_json(path)["analyzers"]}
    fitted: dict[int, dict[str, Any]] = {}
    for i in sorted(plan.levels):
        result = dict(entries[i])
        step = plan.steps[i]
        if isinstance(step, VocabularyStep):
            with FileSystems.open(_vocabulary_path(directory, path, result)) as f:
                lines = f.read().split(b"\n")[:-1]
            result["values"] = lines if step.binary else [v.decode("utf-8") for v in lines]
        fitted[i] = result
    return fitted


def manifest_section(
    plan: PreprocessPlan,
    files: list[str],
    output_dir: str,
    reused_from: str | None,
    fitted_on: str | None = None,
) -> dict[str, Any]:
    """The manifest's `transform` section: the steps as configured and the artifact files."""
    prefix = output_dir.rstrip("/") + "/"

    def relative(path: str) -> str:
        return path[len(prefix) :] if path.startswith(prefix) else posixpath.basename(path)

    return {
        "steps": plan.configured(),
        "analysis_passes": 0 if reused_from else plan.num_passes,
        "artifacts_from": reused_from,
        # the split the analyzers saw (None: every row, or none fitted in this run)
        "fitted_on_split": fitted_on,
        "files": sorted(relative(f) for f in files),
    }
