"""The usual ways the project is measured against: the per-row protobuf encoder, tfx_bsl's
encoder and a TFX-style Beam pipeline.

No project code here: throughput.py runs the workers below (`_worker ...`) as separate
processes, possibly under another Python environment (--tfx-python).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from measure import timed

# --------------------------------------------------------------------------------------------
# Baseline encoders
# --------------------------------------------------------------------------------------------


def _leaf(t: pa.DataType) -> tuple[pa.DataType, int]:
    depth = 0
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
        depth += 1
    return t, depth


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int64"
    if pa.types.is_floating(t):
        return "float"
    return "bytes"


def pyproto_encoder(schema: pa.Schema) -> Callable[[pa.Table], list[bytes]]:
    """The per-row way: to_pylist(), then one tf.train.Example per row, SerializeToString."""
    import tensorflow as tf

    plan = []
    for field in schema:
        leaf, depth = _leaf(field.type)
        plan.append((field.name, _kind(leaf), depth))
    example, features, feature = tf.train.Example, tf.train.Features, tf.train.Feature
    int64_list, float_list, bytes_list = tf.train.Int64List, tf.train.FloatList, tf.train.BytesList

    def encode(table: pa.Table) -> list[bytes]:
        out = []
        for row in table.to_pylist():
            feats = {}
            for name, kind, depth in plan:
                v = row[name]
                if v is None:
                    continue
                if depth == 0:
                    v = [v]
                elif depth > 1:
                    for _ in range(depth - 1):
                        v = [x for inner in v for x in inner]
                if kind == "int64":
                    feats[name] = feature(int64_list=int64_list(value=v))
                elif kind == "float":
                    feats[name] = feature(float_list=float_list(value=v))
                else:
                    v = [s.encode("utf-8") if isinstance(s, str) else s for s in v]
                    feats[name] = feature(bytes_list=bytes_list(value=v))
            out.append(example(features=features(feature=feats)).SerializeToString())
        return out

    return encode


def _as_list_column(arr: pa.Array) -> pa.Array:
    """Any column -> list<leaf>, strings as binary (the types tfx_bsl encodes)."""
    out = _flat_list(arr)
    leaf = out.type.value_type
    if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
        out = out.cast(pa.list_(pa.binary()))
    return out


def _flat_list(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not _leaf(t.value_type)[1]:
            return arr
    n = len(arr)
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        offsets = pa.array(np.arange(n + 1, dtype=np.int32))
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(offsets, arr, mask=mask)
    # Nested or fixed-size lists: one flat list of leaves per row.
    offsets = np.arange(n + 1, dtype=np.int64)
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        if pa.types.is_fixed_size_list(arr.type):
            size = arr.type.list_size
            inner = (np.arange(len(arr) + 1, dtype=np.int64) + arr.offset) * size
            values = arr.values
        else:
            inner = arr.offsets.to_numpy().astype(np.int64)
            values = arr.values
        offsets = inner[offsets]
        arr = values
    start = int(offsets[0])
    arr = arr.slice(start, int(offsets[-1]) - start)
    return pa.ListArray.from_arrays(pa.array((offsets - start).astype(np.int32)), arr)


def tfx_bsl_available() -> str | None:
    """None when tfx_bsl's RecordBatchToExamplesEncoder imports here, else why not."""
    try:
        from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder  # noqa: F401
    except Exception as err:  # ImportError, or a binary built against another pyarrow
        return f"{type(err).__name__}: {err}"
    return None


def tfx_bsl_prepare(table: pa.Table) -> list[pa.RecordBatch]:
    """The table as record batches of list columns, the form tfx_bsl encodes."""
    batch = table.combine_chunks().to_batches()[0]
    columns = [_as_list_column(batch.column(i)) for i in range(batch.num_columns)]
    return pa.Table.from_arrays(columns, names=table.column_names).to_batches()


def tfx_bsl_encoder() -> Callable[[pa.Table], list[bytes]]:
    """tfx_bsl's C++ encoder (columns converted to list<leaf> first)."""
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    coder = RecordBatchToExamplesEncoder()

    def encode(table: pa.Table) -> list[bytes]:
        out: list[bytes] = []
        for batch in tfx_bsl_prepare(table):
            out.extend(coder.encode(batch))
        return out

    return encode


# --------------------------------------------------------------------------------------------
# Workers (separate processes)
# --------------------------------------------------------------------------------------------


def worker_tfx_bsl_encode(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    import tfx_bsl
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    table = pq.read_table(a.input)
    prepared = tfx_bsl_prepare(table)
    coder = RecordBatchToExamplesEncoder()
    t = timed(lambda: [coder.encode(b) for b in prepared], a.repeat)
    print(
        json.dumps(
            {"rows": table.num_rows, **t, "version": tfx_bsl.__version__, "pyarrow": pa.__version__}
        )
    )
    return 0


def worker_tfx_style(argv: Sequence[str]) -> int:
    """ReadFromParquetBatched -> per-row encode -> WriteToTFRecord, on FnApiRunner."""
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--compression", choices=("gzip", "none"), default="gzip")
    p.add_argument("--encoder", choices=("pyproto", "tfx_bsl"), default="pyproto")
    a, beam_args = p.parse_known_args(argv)
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions

    class Encode(beam.DoFn):
        def __init__(self, encoder: str) -> None:
            self._encoder = encoder
            self._fn: Callable[[pa.Table], list[bytes]] | None = None

        def process(self, table: pa.Table) -> Any:
            if self._fn is None:
                self._fn = (
                    tfx_bsl_encoder()
                    if self._encoder == "tfx_bsl"
                    else pyproto_encoder(table.schema)
                )
            yield from self._fn(table)

    compression = (
        CompressionTypes.GZIP if a.compression == "gzip" else CompressionTypes.UNCOMPRESSED
    )
    suffix = ".tfrecord.gz" if a.compression == "gzip" else ".tfrecord"
    options = PipelineOptions(["--runner=FnApiRunner", *beam_args])
    start = time.monotonic()
    with beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | "Read" >> beam.io.ReadFromParquetBatched(a.input)
            | "Encode" >> beam.ParDo(Encode(a.encoder))
            | "Write"
            >> beam.io.WriteToTFRecord(
                os.path.join(a.output, "train"),
                file_name_suffix=suffix,
                compression_type=compression,
            )
        )
    print(f"tfx-style: {time.monotonic() - start:.1f} s in the pipeline")
    return 0
