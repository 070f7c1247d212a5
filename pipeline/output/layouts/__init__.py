"""Output layouts other than flat: the metadata files their readers need, written beside the
shards before the manifest (which lists them under `layout`), and the checks at plan time.

- tfds: `dataset_info.json` and `features.json` (pipeline/output/layouts/tfds.py);
- tfx: `examples_artifact.json` (pipeline/output/layouts/tfx.py).

Shard naming per layout: transforms/write/layout.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.output.layouts.tfds import TFDS_FILES, check_tfds_features, write_tfds_metadata
from pipeline.output.layouts.tfx import TFX_FILES, write_examples_artifact
from pipeline.output.manifest import Manifest
from transforms.encode.schema import FeatureSpec

__all__ = ["LAYOUT_FILES", "check_layout_features", "layout_section", "write_layout_files"]

LAYOUT_FILES = {"tfds": TFDS_FILES, "tfx": TFX_FILES}
_WRITERS = {"tfds": write_tfds_metadata, "tfx": write_examples_artifact}


def layout_section(layout: str) -> dict[str, Any] | None:
    """The manifest's `layout` section: the layout and its files; None for flat."""
    if layout not in LAYOUT_FILES:
        return None
    return {"name": layout, "files": list(LAYOUT_FILES[layout])}


def check_layout_features(layout: str, specs: Sequence[FeatureSpec]) -> None:
    """SchemaError for a feature the layout's reader cannot take as written."""
    if layout == "tfds":
        check_tfds_features(specs)


def write_layout_files(output: str, manifest: Manifest) -> list[str]:
    """Write the metadata files of the manifest's layout (none for flat); their paths."""
    if manifest.layout is None:
        return []
    return _WRITERS[manifest.layout["name"]](output, manifest)
