"""The schema-drift gate: a run's features against the manifest of an earlier run.

A feature that disappeared, or whose type changed (what the reader sees: Example kind, restored
dtype, shape, encoding, unit, or the source column's Arrow type) fails the run before it writes
anything; a new feature is only reported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pipeline.output.dataset import is_dataset, read_output_manifest
from pipeline.output.manifest import MANIFEST_NAME, StoredFeature
from transforms.encode.schema import FeatureSpec, SchemaError
from transforms.fs import FileSystems

__all__ = ["TYPE_FIELDS", "SchemaDriftError", "check_drift", "load_expected"]

TYPE_FIELDS = ("kind", "dtype", "shape", "encoding", "unit", "source_type")


class SchemaDriftError(SchemaError):
    """A feature of the expected schema disappeared or changed type."""


def load_expected(path: str) -> list[StoredFeature]:
    """The features of a previous manifest: `path` is the manifest.json or its output dir (an
    incremental dataset's directory: the features its spans share)."""
    if not path.endswith(".json"):
        if is_dataset(path) and not FileSystems.exists(FileSystems.join(path, MANIFEST_NAME)):
            try:  # an incremental dataset: its spans' features
                return list(read_output_manifest(path).features)
            except (OSError, ValueError) as err:
                raise SchemaDriftError(f"{path}: cannot read the expected schema: {err}") from err
        path = FileSystems.join(path, MANIFEST_NAME)
    try:
        with FileSystems.open(path) as f:
            manifest = json.loads(f.read().decode("utf-8"))
        return [StoredFeature.from_json(entry) for entry in manifest["features"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise SchemaDriftError(f"{path}: cannot read the expected schema: {err}") from err


def check_drift(
    expected: Sequence[StoredFeature], specs: Sequence[FeatureSpec], source: str
) -> list[str]:
    """Raise SchemaDriftError naming every feature of `expected` missing from `specs` or of
    another type; return the names of the features `expected` does not have."""
    now = {spec.name: spec.to_json() for spec in specs}
    problems = []
    for stored in expected:
        name, old = stored.name, stored.spec.to_json()
        if name not in now:
            problems.append(f"column {name!r} disappeared")
            continue
        changed = [
            f"{field} {old.get(field)!r} -> {now[name].get(field)!r}"
            for field in TYPE_FIELDS
            if old.get(field) != now[name].get(field)
        ]
        if changed:
            problems.append(f"column {name!r} changed type: {', '.join(changed)}")
    if problems:
        raise SchemaDriftError(f"schema drift against {source}: " + "; ".join(problems))
    known = {stored.name for stored in expected}
    return [name for name in now if name not in known]
