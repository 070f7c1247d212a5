"""The checks a manifest's JSON passes before it is read (pipeline/output/manifest.py): the keys a
reader needs, and every listed path confined to the output directory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transforms.confine import check_inside

__all__ = ["TF_COMPRESSION", "check_manifest_json"]

# The manifest's compression -> tf.data's compression_type.
TF_COMPRESSION = {"gzip": "GZIP", "zlib": "ZLIB", "none": ""}


def check_manifest_json(path: str, data: Mapping[str, Any], strict: bool) -> None:
    """ValueError naming the key when the manifest lacks what a reader needs: splits and
    features; with `strict` (verify), also the row count and the compression."""
    required = [("splits", dict), ("features", list)]
    if strict or "rows" in data:
        required.append(("rows", int))
    if strict or "compression" in data:
        required.append(("compression", str))
    for key, kind in required:
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{path}: key {key!r} is missing or not a {kind.__name__}")
    if "compression" in data and data["compression"] not in TF_COMPRESSION:
        raise ValueError(
            f"{path}: compression {data['compression']!r} is not one of {list(TF_COMPRESSION)}"
        )
    for name, split in data["splits"].items():
        files = split.get("files") if isinstance(split, dict) else None
        if not isinstance(files, list) or not isinstance(split.get("rows"), int):
            raise ValueError(f"{path}: key 'splits.{name}' needs 'rows' and a list of 'files'")
    if not all(isinstance(f, dict) for f in data["features"]):
        raise ValueError(f"{path}: key 'features' must be a list of mappings")
    _check_confined(path, data)


def _check_confined(path: str, data: Mapping[str, Any]) -> None:
    """ValueError naming the key when a listed shard or artifact file leaves the output
    directory (`..`, an absolute path, a scheme): `--overwrite` deletes these files and the
    readers open them, so none may point elsewhere (transforms/confine.py). Bad-row files are
    listed as written (absolute) and found by their name in `_errors/`."""
    for name, split in data["splits"].items():
        for i, file in enumerate(split["files"]):
            check_inside(file, path, f"splits.{name}.files[{i}]")
        shards = split.get("shards", [])
        for i, shard in enumerate(shards if isinstance(shards, list) else []):
            if isinstance(shard, dict) and "file" in shard:
                check_inside(shard["file"], path, f"splits.{name}.shards[{i}].file")
            if isinstance(shard, dict) and shard.get("index") is not None:
                check_inside(shard["index"], path, f"splits.{name}.shards[{i}].index")
    for section in ("transform", "layout"):  # {"files": [paths]} sections
        entry = data.get(section)
        files = entry.get("files", []) if isinstance(entry, dict) else []
        if not isinstance(files, list):
            raise ValueError(f"{path}: key '{section}.files' must be a list of paths")
        for i, file in enumerate(files):
            check_inside(file, path, f"{section}.files[{i}]")
    statistics = data.get("statistics") or {}
    if not isinstance(statistics, dict):
        raise ValueError(f"{path}: key 'statistics' must map split names to paths")
    for name, file in statistics.items():
        check_inside(file, path, f"statistics.{name}")
    if data.get("schema") is not None:
        check_inside(data["schema"], path, "schema")
