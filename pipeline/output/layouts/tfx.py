"""What a TFX Examples artifact records about an output in the tfx layout, in
`examples_artifact.json` beside the `Split-<split>/` directories.

TFX finds a split's records as every file under `<artifact uri>/Split-<split>/`, and reads them
by the artifact's properties: `split_names` (a JSON list, as TFX encodes it), and the custom
properties `file_format` (`tfrecords_gzip`: TFRecord files, compression told by the `.gz`
suffix) and `payload_format` (`FORMAT_TF_EXAMPLE`, or `FORMAT_TF_SEQUENCE_EXAMPLE` for a
`sequence:` job). An Importer node given these (the output
directory as `source_uri`) hands the files to TFX components as they are
(docs/downstream.md).
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.output.manifest import Manifest
from transforms.fs import FileSystems
from transforms.write.layout import TFX_SPLIT_DIR

__all__ = ["EXAMPLES_ARTIFACT", "TFX_FILES", "examples_artifact", "write_examples_artifact"]

EXAMPLES_ARTIFACT = "examples_artifact.json"
TFX_FILES = (EXAMPLES_ARTIFACT,)


def examples_artifact(manifest: Manifest) -> dict[str, Any]:
    """The artifact's type, properties and custom properties, and per split its directory and
    row count."""
    names = list(manifest.splits)
    return {
        "type_name": "Examples",
        "properties": {"split_names": json.dumps(names)},
        "custom_properties": {
            "file_format": "tfrecords_gzip",
            "payload_format": "FORMAT_TF_EXAMPLE"
            if manifest.sequence is None
            else "FORMAT_TF_SEQUENCE_EXAMPLE",
        },
        "splits": {
            name: {"dir": TFX_SPLIT_DIR.format(split=name), "rows": entry.rows}
            for name, entry in manifest.splits.items()
        },
    }


def write_examples_artifact(output: str, manifest: Manifest) -> list[str]:
    """Write examples_artifact.json into `output`; its path."""
    path = FileSystems.join(output, EXAMPLES_ARTIFACT)
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(json.dumps(examples_artifact(manifest), indent=2).encode("utf-8"))
    return [path]
