"""manifest.json: the schema contract between the writer and the reader, as a typed object.

Written last, and only when every shard is in place; a directory without it is not a
complete output. Paths of shards are relative to the output directory, so it can be moved;
a listed path that would leave it is refused when the manifest is parsed (`from_json`).
`Manifest` is built in one place (pipeline/engines/finish.py, when the job ends) and read
through its attributes by the reader, verify, inspect, the drift check, the run summary and the
report. Its sections are typed records of their own (sections.py), named here too.
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

from pipeline.output.checks import TF_COMPRESSION, check_manifest_json
from pipeline.output.entries import check_no_link
from pipeline.output.sections import (
    BadRowFiles,
    SequenceSection,
    ShardEntry,
    Sharding,
    SplitEntry,
    SplitRule,
    StoredFeature,
)
from transforms import fs
from transforms.encode.features import FeatureSpec, nulls_key

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "TF_COMPRESSION",
    "BadRowFiles",
    "Manifest",
    "SequenceSection",
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
    # A layout other than flat: {"name": "tfds" | "tfx", "files": [its metadata files]}
    layout: Mapping[str, Any] | None = None
    sequence: SequenceSection | None = None  # SequenceExamples: `features` is the context
    # split -> its TF Metadata statistics file; the TF Metadata schema file (both relative)
    statistics: Mapping[str, str] | None = None
    schema: str | None = None
    # schema: unify: {"mode": "unify", "columns": {name: Arrow type}, "missing": {file: [names]}}
    input_schema: Mapping[str, Any] | None = None

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
                    "shards": [shard.to_json() for shard in s.shards],
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
        if self.layout is not None:
            out["layout"] = self.layout
        if self.sequence is not None:
            out["sequence"] = self.sequence.to_json()
        if self.statistics is not None:
            out["statistics"] = dict(self.statistics)
        if self.schema is not None:
            out["schema"] = self.schema
        if self.input_schema is not None:
            out["input_schema"] = dict(self.input_schema)
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
        check_manifest_json(path, data, strict)
        try:
            splits = {
                name: SplitEntry(
                    int(s["rows"]),
                    tuple(s["files"]),
                    tuple(
                        ShardEntry(e["file"], e.get("rows"), e.get("bytes"), e.get("index"))
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
                layout=data.get("layout"),
                sequence=data.get("sequence") and SequenceSection.from_json(data["sequence"]),
                statistics=None
                if data.get("statistics") is None
                else {str(k): str(v) for k, v in data["statistics"].items()},
                schema=data.get("schema"),
                input_schema=data.get("input_schema"),
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
        layout: Mapping[str, Any] | None = None,
        sequence: SequenceSection | None = None,
        statistics: Mapping[str, str] | None = None,
        schema: str | None = None,
        indexes: Mapping[str, str] | None = None,
        input_schema: Mapping[str, Any] | None = None,
    ) -> Manifest:
        """The manifest of a finished run (all facts come in as arguments).

        `shards`: the final files of each split (transforms/write/files.py `ShardFile`: path,
        rows, bytes), made relative to `output_dir`; `indexes`: shard path -> its index file.
        """
        indexes = indexes or {}
        prefix = output_dir.rstrip("/") + "/"

        def relative(path: str) -> str:
            return path[len(prefix) :] if path.startswith(prefix) else posixpath.basename(path)

        splits = {}
        for name, files in shards.items():
            entries = sorted(
                (
                    ShardEntry(
                        relative(f.path),
                        f.rows,
                        f.bytes,
                        relative(indexes[f.path]) if f.path in indexes else None,
                    )
                    for f in files
                ),
                key=lambda e: e.file,
            )
            splits[name] = SplitEntry(
                int(rows.get(name, 0)), tuple(e.file for e in entries), tuple(entries)
            )
        return cls(
            compression=compression,
            rows=sum(rows.values()),
            splits=splits,
            features=tuple(_stored(s, null_counts) for s in specs),
            source_format=source_format,
            sources=tuple(sources),
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            versions=dict(versions),
            transform=transform,
            split=split,
            sharding=sharding,
            bad_rows=bad_rows,
            config=config,
            layout=layout,
            sequence=sequence,
            statistics=statistics,
            schema=schema,
            input_schema=input_schema,
        )

    def metadata_files(self) -> list[str]:
        """The statistics files, the schema and the shards' index files, relative to the output
        directory."""
        files = list((self.statistics or {}).values())
        files += [s.index for split in self.splits.values() for s in split.shards if s.index]
        return files + ([self.schema] if self.schema else [])


def _stored(spec: FeatureSpec, null_counts: Mapping[str, int]) -> StoredFeature:
    """A feature's manifest entry from the run's counts: its null rows, and per list level
    the rows that hold its null positions (`BatchStats.nulls`)."""
    levels = range(1, spec.list_levels + 1)
    inner = tuple(
        (k, int(null_counts[nulls_key(spec.name, k)]))
        for k in levels
        if null_counts.get(nulls_key(spec.name, k), 0) > 0
    )
    return StoredFeature(spec, int(null_counts.get(spec.name, 0)), inner)


def manifest_path(output_dir: str) -> str:
    return fs.join(output_dir, MANIFEST_NAME)


def write_manifest(output_dir: str, manifest: Manifest) -> str:
    path = manifest_path(output_dir)
    with fs.FileSystems.create(path, mime_type="application/json") as f:
        f.write(json.dumps(manifest.to_json(), indent=2, sort_keys=False).encode("utf-8"))
    return path


def read_manifest(output_dir: str, strict: bool = False) -> Manifest:
    """The manifest of the output in `output_dir`; FileNotFoundError when there is none,
    ValueError when it is malformed or of another version (see `Manifest.from_json`)."""

    path = check_no_link(output_dir, manifest_path(output_dir))
    if not fs.exists(path):
        raise FileNotFoundError(
            f"{path}: no manifest; the directory is not a complete tfrecord-etl output"
        )
    with fs.open_read(path) as f:
        try:
            data = json.loads(f.read().decode("utf-8"))
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from err
    return Manifest.from_json(data, path, strict)
