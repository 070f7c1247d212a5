"""manifest.json: the schema contract between the writer and the reader.

Written last, and only when every shard is in place; a directory without it is not a
complete output. Paths of shards are relative to the output directory, so it can be moved.
"""

from __future__ import annotations

import datetime
import json
import posixpath
from collections.abc import Sequence
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms.schema import FeatureSpec
from transforms.shard_files import ShardFile

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "TF_COMPRESSION",
    "build_manifest",
    "manifest_path",
    "read_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
TF_COMPRESSION = {"gzip": "GZIP", "zlib": "ZLIB", "none": ""}


def manifest_path(output_dir: str) -> str:
    return FileSystems.join(output_dir, MANIFEST_NAME)


def build_manifest(
    *,
    specs: Sequence[FeatureSpec],
    null_counts: dict[str, int],
    rows: dict[str, int],
    shards: dict[str, Sequence[ShardFile]],
    output_dir: str,
    compression: str,
    sources: Sequence[str],
    source_format: str,
    versions: dict[str, str],
    transform: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest as a JSON-able dict (pure function: all facts come in as arguments).

    `shards`: the final files of each split, with their records and bytes when the writer
    counted them. `transform`: the preprocessing section (steps as configured, analyzer
    artifact files relative to the output directory), present only with `transforms:`.
    """
    features = []
    for spec in specs:
        entry = spec.to_json()
        entry["null_count"] = int(null_counts.get(spec.name, 0))
        features.append(entry)
    prefix = output_dir.rstrip("/") + "/"

    def relative(path: str) -> str:
        return path[len(prefix) :] if path.startswith(prefix) else posixpath.basename(path)

    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": dict(versions),
        "compression": compression,
        "tf_compression_type": TF_COMPRESSION[compression],
        "rows": sum(rows.values()),
        "splits": {
            split: {
                "rows": int(rows.get(split, 0)),
                "files": sorted(relative(f.path) for f in files),
                "shards": sorted(
                    ({"file": relative(f.path), "rows": f.rows, "bytes": f.bytes} for f in files),
                    key=lambda entry: entry["file"],
                ),
            }
            for split, files in shards.items()
        },
        "source_format": source_format,
        "sources": list(sources),
        "features": features,
    }
    if transform is not None:
        manifest["transform"] = transform
    return manifest


def write_manifest(output_dir: str, manifest: dict[str, Any]) -> str:
    path = manifest_path(output_dir)
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=False).encode("utf-8"))
    return path


def read_manifest(output_dir: str) -> dict[str, Any]:
    path = manifest_path(output_dir)
    if not FileSystems.exists(path):
        raise FileNotFoundError(
            f"{path}: no manifest; the directory is not a complete tfrecord-etl output"
        )
    with FileSystems.open(path) as f:
        manifest = json.loads(f.read().decode("utf-8"))
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise ValueError(
            f"{path}: manifest_version {manifest.get('manifest_version')} is not supported"
        )
    return manifest
