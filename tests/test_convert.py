"""The per-batch conversion (transforms/convert.py): the stages one by one, and `convert_batch`
(what verify derives records with) equal to them run by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from conftest import encode_rows, plan_specs

from transforms.batch import TableBatch
from transforms.convert import Conversion, convert_batch
from transforms.encode.records import encode_table
from transforms.preprocess.chain import apply_steps, parse_steps, plan_preprocess
from transforms.split.assign import assign_splits, split_batch

SPLITS = (("train", 3), ("eval", 1))


def _table(n: int = 200) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array([None if i % 7 == 0 else i * 0.5 for i in range(n)], pa.float64()),
            "name": pa.array([f"n{i % 13}" for i in range(n)]),
        }
    )


def _records(encoded) -> list[bytes]:
    return encoded.records()


def test_one_split_is_the_encoder_and_source_rows():
    table = _table()
    conversion = Conversion(tuple(plan_specs(table)), framed=False)
    batch = TableBatch(table, "t.parquet", 100)
    out, bad = convert_batch(conversion, batch, {})
    assert bad == [] and len(out) == 1
    assert _records(out[0].records) == encode_rows(table, first_row=100)
    assert out[0].rows.tolist() == list(range(100, 300))
    assert not out[0].split_ids.any() and out[0].split_rows(conversion.splits) == {"train": 200}
    [(name, whole)] = out[0].by_split(conversion.splits)
    assert name == "train" and whole is out[0].records


def test_splits_hashed_from_the_records_as_written():
    table = _table()
    specs = tuple(plan_specs(table))
    conversion = Conversion(specs, SPLITS, framed=True)
    encoded, _ = conversion.encode(TableBatch(table, "t.parquet", 0))
    plain, _ = encode_table(table, specs, "t.parquet", 0, framed=False)
    expected = assign_splits([3, 1], "", buffer=plain.buffer, offsets=plain.offsets)
    assert encoded.split_ids.tolist() == expected.tolist()  # frames aside, the same hash
    parts = dict(encoded.by_split(SPLITS))
    every = _records(plain)
    for s, name in enumerate(["train", "eval"]):
        chosen = [every[i] for i in np.flatnonzero(expected == s)]
        got = [r[12:-4] for r in _records(parts[name])]  # the Example inside each frame
        assert got == chosen
    assert encoded.split_rows(SPLITS) == {
        "train": int((expected == 0).sum()),
        "eval": int((expected == 1).sum()),
    }


def test_split_before_preprocess_then_steps_then_encode():
    table = _table()
    source_specs = tuple(plan_specs(table))
    steps = parse_steps(
        [{"filter": {"expr": "x > 10"}}, {"derive": {"name": "y", "expr": "x * 2"}}], "test"
    )
    plan = plan_preprocess(steps, table.schema)
    specs = tuple(plan_specs(plan.output_schema.empty_table()))
    conversion = Conversion(
        specs,
        SPLITS,
        split_key="name",
        source_specs=source_specs,
        split_before_preprocess=True,
        preprocess=plan,
        framed=False,
    )
    batch = TableBatch(table, "t.parquet", 0)
    out, bad = convert_batch(conversion, batch, {})
    assert bad == []
    by_hand = []
    for part in split_batch(batch, SPLITS, "", "name", source_specs):
        kept = apply_steps(plan, part, {})
        encoded, _ = encode_table(kept.table, specs, kept.source, kept.first_row, False, kept.rows)
        by_hand.append((part.split, _records(encoded), kept.rows.tolist()))
    got = [(SPLITS[int(o.split_ids[0])][0], _records(o.records), o.rows.tolist()) for o in out]
    assert got == by_hand
    assert sum(len(r) for _, r, _ in got) == sum(1 for v in table["x"].to_pylist() if v and v > 10)


def test_a_row_a_stage_cannot_take_is_a_bad_row_of_that_stage():
    table = pa.table({"n": pa.array([1, 2, None, 4], pa.int64())})
    specs = plan_specs(table, {"n": {"null_policy": "fail"}})
    conversion = Conversion(tuple(specs), framed=False)
    out, bad = convert_batch(conversion, TableBatch(table, "t.csv", 10), {})
    assert [(b["row"], b["column"], b["stage"]) for b in bad] == [(12, "n", "encode")]
    assert out[0].rows.tolist() == [10, 11, 13] and out[0].records.num_records == 3
