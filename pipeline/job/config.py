"""JobConfig: the YAML config and the CLI flags, merged and validated once.

Every flag has a key of the same name (dashes -> underscores) in the YAML file, both declared
once in pipeline/job/flags.py; a flag given on the command line wins over the file. Errors name the
config file and the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import yaml

from pipeline.job.errors import ConfigError, closest
from pipeline.job.flags import scalar_options
from transforms.encode.schema import NULL_POLICIES, ColumnOptions
from transforms.files.options import FileColumn, FilesConfigError, files_to_json, parse_files
from transforms.preprocess.chain import parse_steps
from transforms.preprocess.spec import StepConfig, StepError
from transforms.read.delimited.reader import CsvOptions
from transforms.sequence.layout import SequenceError, SequenceOptions, parse_sequence
from transforms.write.compression import INDEX_MEMBER_BYTES, check_level
from transforms.write.layout import DEFAULT_LAYOUT, layout_compressions
from transforms.write.sizing import DEFAULT_SHARD_MB

__all__ = [
    "OMITTED_AT_DEFAULT",
    "ConfigError",
    "JobConfig",
    "config_from_json",
    "config_to_json",
    "load_config",
]


@dataclasses.dataclass(frozen=True)
class JobConfig:
    inputs: tuple[str, ...]
    output: str
    format: str | None = None
    schema: str = "strict"  # strict | unify: the files' schemas (transforms/read/unify.py)
    num_shards: int = 0  # files per split; 0: as many as shard_mb gives
    shard_mb: float = DEFAULT_SHARD_MB  # the target shard size in MiB (2**20 bytes)
    compression: str = "gzip"
    compression_level: int | None = None  # None: the gzip backend's default
    gzip_backend: str = "isal"
    sink: str = "blocks"
    batch_rows: int = 32768
    overwrite: bool = False
    csv: CsvOptions = dataclasses.field(default_factory=CsvOptions)
    columns: Mapping[str, ColumnOptions] = dataclasses.field(default_factory=dict)
    transforms: tuple[StepConfig, ...] = ()  # checked against the schema by plan_job
    transform_artifacts: str | None = None  # a previous output's fitted analyzers, to reuse
    max_bad_rows: int = 0  # bad rows allowed (any number up to this passes) ...
    max_bad_fraction: float = 0.0  # ... or up to this fraction of the rows read
    splits: tuple[tuple[str, int], ...] = (("train", 1),)  # (name, weight)
    split_key: str | None = None  # the column whose value picks the split; None: the whole row
    split_salt: str = ""
    expect_schema: str | None = None  # a previous manifest (or its output dir) to check against
    shuffle: tuple[str, ...] = ()  # the splits written in a seeded global shuffle
    shuffle_seed: int = 0
    fit_split: str | None = None  # where analyzers are fitted; None: "train", else the first split
    layout: str = DEFAULT_LAYOUT  # flat | tfds | tfx (transforms/write/layout.py)
    sequence: SequenceOptions | None = None  # SequenceExamples instead of Examples
    files: tuple[FileColumn, ...] = ()  # columns of file references read into the records
    stats: bool = True  # feature statistics per split (transforms/stats/)
    sketches: bool = False  # each split's statistics accumulator saved too (statistics/<split>/
    # sketches.npz): set for the spans of an incremental dataset, which merges them (not recorded)
    report: bool = False  # write report.html after the run (not recorded in the manifest)
    index: bool = False  # an index file beside each shard (transforms/write/index.py)
    engine: str = "auto"  # what runs the job (pipeline/engines/choose.py; not recorded)
    workers: int = 0  # the in-process engine's processes; 0: this machine's cores (not recorded)

    def member_bytes(self) -> int | None:
        """The framed bytes of a gzip member of an indexed output (None: one member a block)."""
        return INDEX_MEMBER_BYTES if self.index and self.compression == "gzip" else None

    def analysis_split(self) -> str | None:
        """The split the analyzers are fitted on; None when there is one split (every row)."""
        if len(self.splits) == 1:
            return None
        names = [name for name, _ in self.splits]
        return self.fit_split or ("train" if "train" in names else names[0])


_OPTIONS = scalar_options()  # key -> Option: the checked scalars (pipeline/job/flags.py)
_SCALARS: dict[str, tuple[type, ...]] = {key: o.types for key, o in _OPTIONS.items()}
_CHOICES = {key: o.choices for key, o in _OPTIONS.items() if o.choices is not None}
_STRUCTURED = ("input", "csv", "columns", "splits", "shuffle", "transforms", "sequence", "files")
_CSV_KEYS = {f.name for f in dataclasses.fields(CsvOptions)}
_COLUMN_KEYS = {f.name for f in dataclasses.fields(ColumnOptions)}
# Options added after outputs were recorded: left out of the manifest's config section at their
# default, so an output that does not use them is the same as before they existed.
OMITTED_AT_DEFAULT = {"layout": DEFAULT_LAYOUT, "stats": True, "index": False, "schema": "strict"}


def _check_type(where: str, value: Any, types: tuple[type, ...]) -> None:
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{where}: expected {types[0].__name__}, got {value!r}")
    if not isinstance(value, types):
        raise ConfigError(f"{where}: expected {types[0].__name__}, got {value!r}")


def _csv_options(source: str, raw: Any) -> CsvOptions:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: key 'csv': expected a mapping")
    unknown = sorted(set(raw) - _CSV_KEYS)
    if unknown:
        raise ConfigError(
            f"{source}: key 'csv.{unknown[0]}' is unknown (known: {sorted(_CSV_KEYS)})"
        )
    values = dict(raw)
    for key in ("column_names", "null_values"):
        if key in values and values[key] is not None:
            if not isinstance(values[key], list):
                raise ConfigError(f"{source}: key 'csv.{key}': expected a list")
            values[key] = tuple(str(v) for v in values[key])
    if "column_types" in values and not isinstance(values["column_types"], Mapping):
        raise ConfigError(f"{source}: key 'csv.column_types': expected a mapping of name -> type")
    for key in ("delimiter", "quote_char"):
        if key in values and (not isinstance(values[key], str) or len(values[key]) != 1):
            raise ConfigError(f"{source}: key 'csv.{key}': expected one character")
    if "range_bytes" in values:
        value = values["range_bytes"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"{source}: key 'csv.range_bytes': expected a whole number of bytes, 0 or more "
                f"(0: every CSV file read whole), got {value!r}"
            )
    return CsvOptions(**values)


def _column_options(source: str, raw: Any) -> dict[str, ColumnOptions]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: key 'columns': expected a mapping of column -> options")
    out = {}
    for name, opts in raw.items():
        where = f"{source}: key 'columns.{name}"  # the closing quote follows the sub-key
        if not isinstance(opts, Mapping):
            raise ConfigError(f"{where}': expected a mapping")
        unknown = sorted(set(opts) - _COLUMN_KEYS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}' is unknown (known: {sorted(_COLUMN_KEYS)})")
        values = dict(opts)
        if values.get("null_policy", "omit") not in NULL_POLICIES:
            raise ConfigError(f"{where}.null_policy': one of {list(NULL_POLICIES)}")
        if "shape" in values and values["shape"] is not None:
            shape = values["shape"]
            if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
                raise ConfigError(f"{where}.shape': expected a list of integers")
            values["shape"] = tuple(shape)
        if values.get("type") is not None and not isinstance(values["type"], str):
            raise ConfigError(f"{where}.type': expected an Arrow type name such as int64")
        out[str(name)] = ColumnOptions(**values)
    return out


_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def _splits(source: str, raw: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{source}: key 'splits': expected a mapping of split name -> weight")
    out = []
    for name, weight in raw.items():
        where = f"{source}: key 'splits.{name}'"
        if not isinstance(name, str) or not _SPLIT_NAME.match(name):
            raise ConfigError(f"{where}: a split name is letters, digits and _")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
            raise ConfigError(f"{where}: expected a positive integer weight, got {weight!r}")
        out.append((name, weight))
    return tuple(out)


def _shuffle(source: str, raw: Any) -> tuple[str, ...] | bool:
    """true / false, or a list of split names; True stands for every split until merged."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, list) and raw and all(isinstance(v, str) for v in raw):
        return tuple(raw)
    raise ConfigError(f"{source}: key 'shuffle': expected true, false or a list of split names")


def _hint(key: str) -> str:
    """What an unknown key may have meant: the closest known key, or every known key."""
    known = sorted([*_SCALARS, *_STRUCTURED])
    near = closest(str(key), known)
    return f"; did you mean {near!r}?" if near else f" (known: {known})"


def _from_mapping(source: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key == "input":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"{source}: key 'input': expected a path or a list of paths")
            out["inputs"] = tuple(items)
        elif key == "csv":
            out["csv"] = _csv_options(source, value)
        elif key == "columns":
            out["columns"] = _column_options(source, value)
        elif key == "splits":
            out["splits"] = _splits(source, value)
        elif key == "shuffle":
            out["shuffle"] = _shuffle(source, value)
        elif key == "transforms":
            try:
                out["transforms"] = parse_steps(value, source)
            except StepError as err:
                raise ConfigError(str(err)) from err
        elif key == "sequence":
            try:
                out["sequence"] = parse_sequence(value, source)
            except SequenceError as err:
                raise ConfigError(str(err)) from err
        elif key == "files":
            try:
                out["files"] = parse_files(value, source)
            except FilesConfigError as err:
                raise ConfigError(str(err)) from err
        elif key in _SCALARS:
            _check_type(f"{source}: key {key!r}", value, _SCALARS[key])
            if key in _CHOICES and value not in _CHOICES[key]:
                raise ConfigError(
                    f"{source}: key {key!r}: {value!r} is not one of {list(_CHOICES[key])}"
                )
            out[key] = value
        else:
            raise ConfigError(f"{source}: key {key!r} is unknown{_hint(key)}")
    return out


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line: where, and what the parser met."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{where}not valid YAML: {problem} (check the indentation and quoting there)"


def load_config(path: str | None, flags: Mapping[str, Any]) -> JobConfig:
    """Merge the YAML file at `path` (if any) with `flags` (flags win) into a JobConfig."""
    values: dict[str, Any] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                raw = yaml.safe_load(f) or {}
        except OSError as err:
            raise ConfigError(f"{path}: cannot read the config: {err}") from err
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: {_yaml_problem(err)}") from err
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{path}: the config must be a mapping of keys to values")
        values.update(_from_mapping(path, raw))
    values.update(_from_mapping("command line", {k: v for k, v in flags.items() if v is not None}))
    return _job_config(values)


def _job_config(values: dict[str, Any]) -> JobConfig:
    """Check what no single key can check alone; the JobConfig."""
    for key in ("inputs", "output"):
        if not values.get(key):
            flag = "--input" if key == "inputs" else "--output"
            raise ConfigError(f"{flag} is required (on the command line or as a key in --config)")
    if values.get("num_shards", 0) < 0:
        raise ConfigError("num_shards: must be 0 (the runner decides) or more")
    if values.get("workers", 0) < 0:
        raise ConfigError("workers: must be 0 (every core this process may use) or more")
    if values.get("max_bad_rows", 0) < 0:
        raise ConfigError("max_bad_rows: must be 0 or more")
    if not 0.0 <= values.get("max_bad_fraction", 0.0) <= 1.0:
        raise ConfigError("max_bad_fraction: must be between 0 and 1")
    if "max_bad_fraction" in values:
        values["max_bad_fraction"] = float(values["max_bad_fraction"])
    names = [name for name, _ in values.get("splits", JobConfig.splits)]
    shuffle = values.get("shuffle", ())
    if shuffle is True:
        values["shuffle"] = tuple(names)
    elif shuffle is False:
        values["shuffle"] = ()
    for key, chosen in (
        ("shuffle", values["shuffle"] if "shuffle" in values else ()),
        ("fit_split", [values["fit_split"]] if values.get("fit_split") else []),
    ):
        unknown = sorted(set(chosen) - set(names))
        if unknown:
            raise ConfigError(f"{key}: {unknown} not among the splits {names}")
    if values.get("shuffle") and values.get("sink") == "tfrecordio":
        raise ConfigError("shuffle: the tfrecordio sink does not shuffle (use sink: blocks)")
    sequence = values.get("sequence")
    if sequence is not None and values.get("files"):
        raise ConfigError("files: a sequence: job does not read files; convert them as Examples")
    key = values.get("split_key")
    if sequence is not None and sequence.grouped and key and key not in sequence.group_by:
        raise ConfigError(
            f"split_key: {key!r} is not a sequence.group_by column; a sequence goes to one split"
        )
    if not values.get("shard_mb", 1) > 0:
        raise ConfigError("shard_mb: must be more than 0")
    if "shard_mb" in values:
        values["shard_mb"] = float(values["shard_mb"])
    if values.get("batch_rows", 1) < 1:
        raise ConfigError("batch_rows: must be at least 1")
    try:
        check_level(values.get("gzip_backend", "isal"), values.get("compression_level"))
    except ValueError as err:
        raise ConfigError(f"compression_level: {err}") from err
    _check_layout(values)
    _check_index(values)
    return JobConfig(**values)


def _check_index(values: dict[str, Any]) -> None:
    """`index` needs shards a reader can enter in the middle, written by the blocks sink."""
    if not values.get("index"):
        return
    if values.get("compression", JobConfig.compression) == "zlib":
        raise ConfigError(
            "index: a zlib shard is one deflate stream, which cannot be entered in the middle; "
            "use compression gzip or none with an index"
        )
    if values.get("sink") == "tfrecordio":
        raise ConfigError("index: the tfrecordio sink is Beam's own; use sink: blocks")


def _check_layout(values: dict[str, Any]) -> None:
    """A layout other than flat needs the blocks sink (it counts each shard's records) and a
    compression its readers open; with `layout: tfds` the compression defaults to none."""
    layout = values.get("layout", DEFAULT_LAYOUT)
    allowed = layout_compressions(layout)
    if allowed is None:
        return
    if layout == "tfds":
        values.setdefault("compression", "none")
    compression = values.get("compression", JobConfig.compression)
    if compression not in allowed:
        reader = "TFDS reads shards uncompressed" if layout == "tfds" else "TFX names gzip shards"
        raise ConfigError(
            f"layout {layout}: compression {compression!r} does not fit ({reader}); "
            f"use compression {allowed[0]}"
        )
    if values.get("sink") == "tfrecordio":
        raise ConfigError(
            f"layout {layout}: the tfrecordio sink does not count each shard's records; "
            "use sink: blocks"
        )


def config_to_json(config: JobConfig) -> dict[str, Any]:
    """The config as the keys of a YAML config file, JSON-able: the manifest's `config` section,
    so a later reader (verify) can run the same read -> preprocess -> encode without the file."""
    csv = dataclasses.asdict(config.csv)
    csv["column_names"] = None if csv["column_names"] is None else list(csv["column_names"])
    csv["null_values"] = list(csv["null_values"])
    csv["column_types"] = dict(config.csv.column_types)
    if config.csv.range_bytes == CsvOptions.range_bytes:  # added later: recorded when set
        del csv["range_bytes"]
    columns = {}
    for name, opts in config.columns.items():
        entry = dataclasses.asdict(opts)
        entry["shape"] = None if opts.shape is None else list(opts.shape)
        if opts.type is None:  # set only where the config fixes a column's type
            del entry["type"]
        columns[name] = entry
    scalars = {key: getattr(config, key) for key in _SCALARS if _OPTIONS[key].recorded}
    for key, default in OMITTED_AT_DEFAULT.items():
        if scalars[key] == default:
            del scalars[key]
    sequence = {} if config.sequence is None else {"sequence": config.sequence.to_json()}
    files = {"files": files_to_json(config.files)} if config.files else {}
    return {
        "input": list(config.inputs),
        **scalars,
        "csv": csv,
        "columns": columns,
        "transforms": [{step.kind: dict(step.configured)} for step in config.transforms],
        "splits": dict(config.splits),  # JSON keeps the order, which the split hash depends on
        **sequence,
        **files,
    }


def config_from_json(data: Mapping[str, Any], source: str) -> JobConfig:
    """A JobConfig from `config_to_json`'s form (a manifest's `config` section), checked as a
    config file is; errors name `source` and the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the config must be a mapping of keys to values")
    return _job_config(_from_mapping(source, data))
