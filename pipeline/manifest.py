"""manifest.json: the schema contract between the writer and the reader, as a typed object.

Written last, and only when every shard is in place; a directory without it is not a
complete output. Paths of shards are relative to the output directory, so it can be moved;
a listed path that would leave it is refused when the manifest is parsed (`from_json`).
`Manifest` is built in one place (pipeline/build.py, when the job ends) and read through its
attributes by the reader, verify, inspect, the drift check, the run summary and the report.
Beam's FileSystems is imported by the functions that open files, so parsing a manifest
(`Manifest.from_json`) imports no Beam. `statistics` and `schema` name the TF Metadata files
(per split `DatasetFeatureStatisticsList`, `schema.pbtxt`) when the run wrote them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.confine import check_inside
from transforms.encode.schema import FeatureSpec

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "TF_COMPRESSION",
    "BadRowFiles",
    "Manifest",
    "ShardEntry",
    "Sharding",
    "SplitEntry",
    "SplitRule",
    "StoredFeature",
    "manifest_path",
    "read_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
TF_COMPRESSION = {"gzip": "GZIP", "zlib": "ZLIB", "none": ""}


@dataclasses.dataclass(frozen=True)
class StoredFeature:
    """One manifest feature entry: the writer's FeatureSpec and how many rows were null."""

    spec: FeatureSpec
    null_count: int = 0

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> StoredFeature:
        return cls(FeatureSpec.from_json(entry), int(entry.get("null_count", 0)))

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "null_count": int(self.null_count)}

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nullable(self) -> bool:
        return self.null_count > 0

    @property
    def ragged(self) -> bool:
        """Whether it comes back as a RaggedTensor (a variable-length list or outer dim)."""
        shape = self.spec.shape
        return shape is None or (len(shape) > 0 and shape[0] < 0)

    @property
    def has_mask(self) -> bool:
        """Whether `restore` adds a `__present` mask (a nullable scalar or fixed array)."""
        return self.nullable and not self.ragged


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard: its path relative to the output; records and bytes when the writer counted
    them (None for Beam's own TFRecord sink)."""

    file: str
    rows: int | None
    bytes: int | None


@dataclasses.dataclass(frozen=True)
class SplitEntry:
    rows: int
    files: tuple[str, ...]
    shards: tuple[ShardEntry, ...] = ()


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """How rows were assigned to splits: weights in order, the key column, the salt."""

    weights: Mapping[str, int]
    key: str | None = None
    salt: str = ""


@dataclasses.dataclass(frozen=True)
class Sharding:
    num_shards: int
    shard_mb: float
    estimated_bytes: int
    shuffle: Mapping[str, Any] | None = None  # {"splits": [...], "seed": n}


@dataclasses.dataclass(frozen=True)
class BadRowFiles:
    count: int = 0
    files: tuple[str, ...] = ()


def _check(path: str, data: Mapping[str, Any], strict: bool) -> None:
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
    transform = data.get("transform")
    files = transform.get("files", []) if isinstance(transform, dict) else []
    if not isinstance(files, list):
        raise ValueError(f"{path}: key 'transform.files' must be a list of paths")
    for i, file in enumerate(files):
        check_inside(file, path, f"transform.files[{i}]")
    statistics = data.get("statistics")
    if statistics is not None and not isinstance(statistics, dict):
        raise ValueError(f"{path}: key 'statistics' must map split names to paths")
    for name, file in (statistics or {}).items():
        check_inside(file, path, f"statistics.{name}")
    if data.get("schema") is not None:
        check_inside(data["schema"], path, "schema")


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What an output holds. Sections an older writer did not write are None (`split`,
    `sharding`, `bad_rows`, `config`) or empty."""

    compression: str
    rows: int | None  # None: not recorded (a hand-made manifest)
    splits: Mapping[str, SplitEntry]
    features: tuple[StoredFeature, ...]
    source_format: str | None = None
    sources: tuple[str, ...] = ()
    created: str | None = None
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    transform: Mapping[str, Any] | None = None  # the preprocessing section (its artifacts)
    split: SplitRule | None = None
    sharding: Sharding | None = None
    bad_rows: BadRowFiles | None = None
    config: Mapping[str, Any] | None = None  # the run's effective config (config_to_json)
    manifest_version: int = MANIFEST_VERSION
    statistics: Mapping[str, str] | None = None  # split -> its DatasetFeatureStatisticsList file
    schema: str | None = None  # the TF Metadata schema.pbtxt

    @property
    def tf_compression_type(self) -> str:
        """The compression_type tf.data.TFRecordDataset takes."""
        return TF_COMPRESSION[self.compression]

    @property
    def bad_row_count(self) -> int:
        return 0 if self.bad_rows is None else self.bad_rows.count

    def files(self) -> list[str]:
        """Every shard, relative to the output directory, split by split."""
        return [f for split in self.splits.values() for f in split.files]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manifest_version": self.manifest_version,
            "created": self.created,
            "versions": dict(self.versions),
            "compression": self.compression,
            "tf_compression_type": self.tf_compression_type,
            "rows": self.rows,
            "splits": {
                name: {
                    "rows": s.rows,
                    "files": list(s.files),
                    "shards": [dataclasses.asdict(shard) for shard in s.shards],
                }
                for name, s in self.splits.items()
            },
            "source_format": self.source_format,
            "sources": list(self.sources),
            "features": [f.to_json() for f in self.features],
        }
        if self.transform is not None:
            out["transform"] = self.transform
        if self.split is not None:
            out["split"] = {
                "weights": dict(self.split.weights),
                "key": self.split.key,
                "salt": self.split.salt,
            }
        if self.sharding is not None:
            out["sharding"] = dataclasses.asdict(self.sharding)
        if self.bad_rows is not None:
            out["bad_rows"] = {"count": self.bad_rows.count, "files": list(self.bad_rows.files)}
        if self.config is not None:
            out["config"] = self.config
        if self.statistics is not None:
            out["statistics"] = dict(self.statistics)
        if self.schema is not None:
            out["schema"] = self.schema
        return out

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], path: str = MANIFEST_NAME, strict: bool = False
    ) -> Manifest:
        """The manifest in `data`; ValueError naming `path` and the key when it is malformed.

        A manifest without `rows` or `compression` (one made by hand) is read when not
        `strict`: the compression then comes from `tf_compression_type`."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{path}: not a JSON object")
        if data.get("manifest_version") != MANIFEST_VERSION:
            raise ValueError(
                f"{path}: manifest_version {data.get('manifest_version')} is not supported"
            )
        _check(path, data, strict)
        try:
            splits = {
                name: SplitEntry(
                    int(s["rows"]),
                    tuple(s["files"]),
                    tuple(
                        ShardEntry(e["file"], e.get("rows"), e.get("bytes"))
                        for e in s.get("shards", [])
                    ),
                )
                for name, s in data["splits"].items()
            }
            features = tuple(StoredFeature.from_json(f) for f in data["features"])
            split = data.get("split")
            sharding = data.get("sharding")
            bad = data.get("bad_rows")
            tf_type = data.get("tf_compression_type", "")
            by_tf_type = {tf: name for name, tf in TF_COMPRESSION.items()}
            return cls(
                compression=data.get("compression") or by_tf_type[tf_type],
                rows=None if data.get("rows") is None else int(data["rows"]),
                splits=splits,
                features=features,
                source_format=data.get("source_format"),
                sources=tuple(data.get("sources", [])),
                created=data.get("created"),
                versions=dict(data.get("versions", {})),
                transform=data.get("transform"),
                split=None if split is None else SplitRule(**split),
                sharding=None if sharding is None else Sharding(**sharding),
                bad_rows=None
                if bad is None
                else BadRowFiles(int(bad.get("count", 0)), tuple(bad.get("files", []))),
                config=data.get("config"),
                statistics=None
                if data.get("statistics") is None
                else {str(k): str(v) for k, v in data["statistics"].items()},
                schema=data.get("schema"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{path}: a malformed entry: {err!r}") from err

    @classmethod
    def build(
        cls,
        *,
        specs: Sequence[FeatureSpec],
        null_counts: Mapping[str, int],
        rows: Mapping[str, int],
        shards: Mapping[str, Sequence[Any]],
        output_dir: str,
        compression: str,
        sources: Sequence[str],
        source_format: str,
        versions: Mapping[str, str],
        transform: Mapping[str, Any] | None = None,
        split: SplitRule | None = None,
        sharding: Sharding | None = None,
        bad_rows: BadRowFiles | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Manifest:
        """The manifest of a finished run (all facts come in as arguments).

        `shards`: the final files of each split (transforms/write/files.py `ShardFile`: path,
        rows, bytes), made relative to `output_dir`.
        """
        prefix = output_dir.rstrip("/") + "/"

        def relative(path: str) -> str:
            return path[len(prefix) :] if path.startswith(prefix) else posixpath.basename(path)

        splits = {}
        for name, files in shards.items():
            entries = sorted(
                (ShardEntry(relative(f.path), f.rows, f.bytes) for f in files),
                key=lambda e: e.file,
            )
            splits[name] = SplitEntry(
                int(rows.get(name, 0)), tuple(e.file for e in entries), tuple(entries)
            )
        return cls(
            compression=compression,
            rows=sum(rows.values()),
            splits=splits,
            features=tuple(StoredFeature(s, int(null_counts.get(s.name, 0))) for s in specs),
            source_format=source_format,
            sources=tuple(sources),
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            versions=dict(versions),
            transform=transform,
            split=split,
            sharding=sharding,
            bad_rows=bad_rows,
            config=config,
        )


def manifest_path(output_dir: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(output_dir, MANIFEST_NAME)


def write_manifest(output_dir: str, manifest: Manifest) -> str:
    from apache_beam.io.filesystems import FileSystems

    path = manifest_path(output_dir)
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(json.dumps(manifest.to_json(), indent=2, sort_keys=False).encode("utf-8"))
    return path


def read_manifest(output_dir: str, strict: bool = False) -> Manifest:
    """The manifest of the output in `output_dir`; FileNotFoundError when there is none,
    ValueError when it is malformed or of another version (see `Manifest.from_json`)."""
    from apache_beam.io.filesystems import FileSystems

    path = manifest_path(output_dir)
    if not FileSystems.exists(path):
        raise FileNotFoundError(
            f"{path}: no manifest; the directory is not a complete tfrecord-etl output"
        )
    with FileSystems.open(path) as f:
        try:
            data = json.loads(f.read().decode("utf-8"))
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from err
    return Manifest.from_json(data, path, strict)
