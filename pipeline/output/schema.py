"""`<output>/schema.pbtxt`: the output's TF Metadata `Schema`, derived from the manifest.

One `feature` per manifest feature, as the records hold it:
- `type`: INT, FLOAT or BYTES, the Example kind (a `keep_float64` column is BYTES: its float64
  values are little-endian bytes, which `load_dataset` turns back into float64).
- `presence`: `min_fraction: 1` when no row lacks the feature; else `min_count` only.
- `shape` for a feature every row has with a fixed shape (`shape {}` for a scalar: what TFX and
  tf.Transform read as a FixedLenFeature); `value_count` (min = max = the number of values) for a
  fixed shape some rows lack; neither for variable-length lists (VarLenFeature, ragged).
- `int_domain` (categorical, 0 .. size - 1) for the ids a `vocabulary`, `hash_bucket` or
  `bucketize` step wrote; a vocabulary's values also as a schema-level `string_domain` named
  after its output, which the string feature it was fitted on refers to (`domain:`) when the
  vocabulary kept every value (no `top_k`, `min_frequency` 1).
- `image_domain {}` for a feature of encoded images (a `files:` image column).
- a list ragged below its first level: its row-lengths features (`NAME__row_lengths_K`, INT)
  after it, and a `tensor_representation_group` entry that makes it a RaggedTensor with
  those features as its row partitions (`uniform_row_length` for a fixed inner dim), as
  tfx_bsl's TensorAdapter builds RaggedTensors.
- a list whose items held nulls: after it (and its row-lengths features) per such level K
  the INT feature `NAME__nulls_K` of their positions, present in the rows that have them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from pipeline.output.manifest import Manifest, StoredFeature
from transforms.encode.features import nulls_key, row_lengths_key
from transforms.fs import FileSystems
from transforms.preprocess.artifacts import read_artifacts
from transforms.preprocess.chain import PreprocessPlan
from transforms.preprocess.fitted_steps import VocabularyStep

__all__ = [
    "SCHEMA_NAME",
    "Domain",
    "fitted_domains",
    "manifest_schema",
    "write_output_schema",
    "write_schema",
]

SCHEMA_NAME = "schema.pbtxt"


@dataclasses.dataclass(frozen=True)
class Domain:
    """What a preprocessing step says of the ids it wrote: how many there are and, for a
    vocabulary, its values (id i is values[i]) and the column it was fitted on."""

    size: int
    values: tuple[str, ...] | None = None
    source: str | None = None
    complete: bool = False  # the vocabulary kept every value it saw


def fitted_domains(
    plan: PreprocessPlan | None, fitted: Mapping[int, Mapping] | None = None
) -> dict[str, Domain]:
    """Output column -> Domain for the steps whose output is a categorical id, in step order
    (a later step writing the same column takes its domain away). `fitted`: the analyzers'
    results (transforms/preprocess/artifacts.py `read_artifacts`), for vocabulary values."""
    domains: dict[str, Domain] = {}
    if plan is None:
        return domains
    for i, step in enumerate(plan.steps):
        for name in getattr(step, "writes", ()):
            domains.pop(name, None)
        size = step.domain() if hasattr(step, "domain") else None
        if isinstance(step, VocabularyStep):
            values = (fitted or {}).get(i, {}).get("values")
            if values is not None:
                texts = tuple(
                    v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values
                )
                complete = step.config["top_k"] is None and step.config["min_frequency"] == 1
                oov = step.config["num_oov_buckets"]
                domains[step.output] = Domain(
                    size if size is not None else len(texts) + oov, texts, step.column, complete
                )
                continue
        if size is not None:
            domains[step.output] = Domain(size)
    return domains


_TYPES = {"int64": schema_pb2.INT, "float": schema_pb2.FLOAT, "bytes": schema_pb2.BYTES}


def manifest_schema(
    manifest: Manifest, domains: Mapping[str, Domain] | None = None
) -> schema_pb2.Schema:
    """The Schema of the output `manifest` describes (see the module docstring)."""
    domains = dict(domains or {})
    schema = schema_pb2.Schema()
    rows = manifest.rows if manifest.rows is not None else 0
    names = {f.name for f in manifest.features}
    string_refs: dict[str, str] = {}
    for name, domain in domains.items():
        if domain.values is None or name not in names:
            continue
        schema.string_domain.add(name=name, value=list(domain.values))
        if domain.complete and domain.source in names and domain.source != name:
            string_refs[domain.source] = name
    for stored in manifest.features:
        spec = stored.spec
        feature = schema.feature.add(name=spec.name, type=_TYPES[spec.kind])
        always = stored.null_count == 0 and rows > 0
        if always:
            feature.presence.min_fraction = 1.0
        feature.presence.min_count = 1 if rows > stored.null_count else 0
        # keep_float64: the row's float64 values are one bytes value, whatever the shape
        shape = () if spec.encoding == "float64_bytes" else spec.shape
        if shape is not None and all(d >= 0 for d in shape):
            if always:
                feature.shape.SetInParent()
                for d in shape:
                    feature.shape.dim.add(size=d)
            else:
                feature.value_count.min = feature.value_count.max = math.prod(shape)
        domain = domains.get(spec.name)
        if domain is not None and spec.kind == "int64":
            feature.int_domain.min = 0
            feature.int_domain.max = domain.size - 1
            feature.int_domain.is_categorical = True
        if spec.name in string_refs and spec.kind == "bytes":
            feature.domain = string_refs[spec.name]
        if spec.image is not None:  # encoded images (a files: image column)
            feature.image_domain.SetInParent()
        if spec.partition_levels:
            _add_row_lengths(schema, stored, always, rows)
        for k, holding in stored.inner_nulls:  # null positions: only in rows with such nulls
            nulls = schema.feature.add(name=nulls_key(spec.name, k), type=schema_pb2.INT)
            if holding == rows:
                nulls.presence.min_fraction = 1.0
            nulls.presence.min_count = 1 if holding else 0
    return schema


def _add_row_lengths(
    schema: schema_pb2.Schema, stored: StoredFeature, always: bool, rows: int
) -> None:
    """A list ragged below its first level: its row-lengths features (INT, present where the
    column is) and its RaggedTensor representation, whose partitions name them."""
    spec = stored.spec
    ragged = schema.tensor_representation_group[""].tensor_representation[spec.name].ragged_tensor
    ragged.feature_path.step.append(spec.name)
    ragged.row_partition_dtype = schema_pb2.TensorRepresentation.RowPartitionDType.INT64
    for k, d in enumerate(spec.shape):
        if k == 0:
            continue
        if d < 0:
            ragged.partition.add(row_length=row_lengths_key(spec.name, k))
            lengths = schema.feature.add(name=row_lengths_key(spec.name, k), type=schema_pb2.INT)
            if always:
                lengths.presence.min_fraction = 1.0
            lengths.presence.min_count = 1 if rows > stored.null_count else 0
        else:
            ragged.partition.add(uniform_row_length=d)


def write_schema(output_dir: str, schema: schema_pb2.Schema) -> str:
    """Write `schema.pbtxt`; returns its name relative to `output_dir`."""
    path = FileSystems.join(output_dir, SCHEMA_NAME)
    with FileSystems.create(path, mime_type="text/plain") as f:
        f.write(text_format.MessageToString(schema).encode("utf-8"))
    return SCHEMA_NAME


def write_output_schema(
    output_dir: str, manifest: Manifest, plan: PreprocessPlan | None, artifacts_dir: str | None
) -> str:
    """Write the schema of a finished output; `artifacts_dir`: where the run's fitted analyzers
    are (transform/), None when it fitted none. Returns its name relative to `output_dir`."""
    fitted = None
    if plan is not None and artifacts_dir is not None and plan.levels:
        fitted = read_artifacts(artifacts_dir, plan)
    return write_schema(output_dir, manifest_schema(manifest, fitted_domains(plan, fitted)))
