"""The SequenceExample encoder: bytes equal TensorFlow's deterministic serialization, grouping
and order, the context check, nulls as empty Features, the list<struct> column, bad groups."""

from __future__ import annotations

import dataclasses
import datetime
import itertools

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from conftest import reference_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.job.config import ConfigError, config_from_json, config_to_json, load_config
from transforms.encode.kernel.example import KernelColumn
from transforms.encode.kernel.sequence import encode_sequences
from transforms.encode.schema import SchemaError
from transforms.sequence.encode import GroupRows, encode_groups, encode_list_column
from transforms.sequence.groups import key_hashes
from transforms.sequence.layout import SequenceOptions, parse_sequence, plan_sequence
from transforms.write.tfrecord import FOOTER_BYTES, HEADER_BYTES

SOURCE = "events.parquet"


def set_feature(feature: tf.train.Feature, kind: str, values: list) -> None:
    target = {"int64": feature.int64_list, "float": feature.float_list}.get(
        kind, feature.bytes_list
    )
    target.SetInParent()
    target.value.extend(values)


def reference(table: pa.Table, groups: list[list[int]], layout) -> list[tf.train.SequenceExample]:
    """One SequenceExample per group of row indices, built with protobuf from the values."""
    rows = reference_rows(table)
    out = []
    for members in groups:
        example = tf.train.SequenceExample()
        example.context.SetInParent()
        example.feature_lists.SetInParent()
        first = rows[members[0]]
        for spec in layout.context:
            if spec.name in first:
                set_feature(example.context.feature[spec.name], spec.kind, first[spec.name])
        for spec in layout.steps:
            feature_list = example.feature_lists.feature_list[spec.name]
            for i in members:
                feature = feature_list.feature.add()
                if spec.name in rows[i]:
                    set_feature(feature, spec.kind, rows[i][spec.name])
        out.append(example)
    return out


def python_groups(table: pa.Table, key: str, order: str | None) -> list[list[int]]:
    """Row indices per group: keys ascending (nulls last), then `order` (nulls last), ties in
    row order."""
    keys = table.column(key).to_pylist()
    orders = table.column(order).to_pylist() if order else [0] * len(keys)

    def sort_key(i: int) -> tuple:
        return (keys[i] is None, keys[i] or 0, orders[i] is None, orders[i] or 0, i)

    by_key: dict = {}
    for i in sorted(range(len(keys)), key=sort_key):
        by_key.setdefault(keys[i], []).append(i)
    return list(by_key.values())


def records(batch) -> list[bytes]:
    return [bytes(batch.buffer[a:b]) for a, b in itertools.pairwise(batch.offsets)]


def group_rows(table: pa.Table) -> GroupRows:
    n = table.num_rows
    return GroupRows(table, np.arange(n, dtype=np.int64), np.zeros(n, np.int64), (SOURCE,))


EVENTS = pa.table(
    {
        "user": pa.array([3, 1, 1, 3, 2, 1, 3], pa.int64()),
        "country": pa.array(["de", "fr", "fr", "de", None, "fr", "de"]),
        "ts": pa.array([30, 12, 10, 10, 5, 12, 20], pa.int32()),
        "click": pa.array([1, 0, None, 0, 1, 1, 0], pa.int8()),
        "price": pa.array([0.5, None, 2.25, 0.0, 1.0, -3.5, 7.0], pa.float32()),
        "page": pa.array(["a", "b", "", None, "e", "f", "g"]),
        "tags": pa.array([[1, 2], [], None, [7], [8, 9, 10], [11], [0]], pa.list_(pa.int64())),
    }
)


def plan(table: pa.Table, **options):
    return plan_sequence(SequenceOptions(**options), table.schema)


def test_grouped_bytes_equal_deterministic_serialization():
    layout = plan(EVENTS, group_by=("user",), order_by="ts", context=("country",))
    encoded, stats, bad = encode_groups(group_rows(EVENTS), layout, framed=False)
    assert bad == []
    groups = python_groups(EVENTS, "user", "ts")
    assert groups == [[2, 1, 5], [4], [3, 6, 0]]  # user 1's ties at t=12 keep row order
    expected = reference(EVENTS, groups, layout)
    got = records(encoded)
    assert got == [e.SerializeToString(deterministic=True) for e in expected]
    assert [tf.train.SequenceExample.FromString(r) for r in got] == expected
    assert (stats.rows, stats.steps) == (3, 7)
    assert stats.nulls["click"] == 1 and stats.nulls["country"] == 1  # user 2's country
    assert stats.nulls["tags"] == 1 and stats.nulls["page"] == 1


def test_null_step_is_an_empty_feature_and_zero_is_a_value():
    layout = plan(EVENTS, group_by=("user",), order_by="ts")
    encoded, _, _ = encode_groups(group_rows(EVENTS), layout, framed=False)
    user1 = tf.train.SequenceExample.FromString(records(encoded)[0])
    clicks = user1.feature_lists.feature_list["click"].feature
    assert [f.WhichOneof("kind") for f in clicks] == [None, "int64_list", "int64_list"]
    assert [list(f.int64_list.value) for f in clicks[1:]] == [[0], [1]]
    pages = user1.feature_lists.feature_list["page"].feature
    assert [list(f.bytes_list.value) for f in pages] == [[b""], [b"b"], [b"f"]]
    tags = user1.feature_lists.feature_list["tags"].feature
    assert [f.WhichOneof("kind") for f in tags] == [None, "int64_list", "int64_list"]


def test_framed_records_read_by_tensorflow(tmp_path):
    layout = plan(EVENTS, group_by=("user",), order_by="ts")
    framed, _, _ = encode_groups(group_rows(EVENTS), layout, framed=True)
    bare, _, _ = encode_groups(group_rows(EVENTS), layout, framed=False)
    path = tmp_path / "seq.tfrecord"
    path.write_bytes(framed.buffer.tobytes())
    read = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    assert read == records(bare)
    first = framed.offsets[0]
    assert bytes(framed.buffer[first + HEADER_BYTES : framed.offsets[1] - FOOTER_BYTES]) == read[0]


def test_context_that_differs_is_a_bad_row_for_each_row_of_its_group():
    table = EVENTS.set_column(1, "country", pa.array(["de", "fr", "fr", "at", None, "fr", "de"]))
    layout = plan(table, group_by=("user",), order_by="ts", context=("country",))
    encoded, stats, bad = encode_groups(group_rows(table), layout, framed=False)
    assert sorted(b["row"] for b in bad) == [0, 3, 6]  # every row of user 3
    assert {b["column"] for b in bad} == {"country"}
    assert all(b["stage"] == "sequence" and b["source"] == SOURCE for b in bad)
    reason = next(b["reason"] for b in bad if b["row"] == 0)
    assert reason.startswith(f"{SOURCE}: row 0: column 'country': a context column differs")
    assert "user=3" in reason and "'at'" in reason and "'de'" in reason
    assert stats.rows == 2 and stats.steps == 4
    kept = [[2, 1, 5], [4]]
    assert records(encoded) == [
        e.SerializeToString(deterministic=True) for e in reference(table, kept, layout)
    ]


def test_value_that_cannot_be_written_drops_its_whole_group():
    table = pa.table(
        {
            "k": pa.array(["x", "y", "x", "y"]),
            "v": pa.array([[1], [None], [3], [4]], pa.list_(pa.int64())),
        }
    )
    layout = plan(table, group_by=("k",))
    encoded, stats, bad = encode_groups(group_rows(table), layout, framed=False)
    assert sorted(b["row"] for b in bad) == [1, 3]
    culprit = next(b for b in bad if b["row"] == 1)
    assert culprit["reason"].startswith(f"{SOURCE}: row 1: column 'v': a list holds a null")
    assert culprit["column"] == "v"
    other = next(b for b in bad if b["row"] == 3)
    assert other["reason"].startswith(f"{SOURCE}: row 3: in the same sequence as a bad row")
    assert stats.rows == 1
    (only,) = records(encoded)
    steps = tf.train.SequenceExample.FromString(only).feature_lists.feature_list["v"].feature
    assert [list(f.int64_list.value) for f in steps] == [[1], [3]]


def test_several_key_columns_and_null_keys_group_together():
    table = pa.table(
        {
            "a": pa.array([1, 1, None, 1, None], pa.int64()),
            "b": pa.array(["x", "y", "x", "x", "x"]),
            "v": pa.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        }
    )
    layout = plan(table, group_by=("a", "b"))
    encoded, stats, _ = encode_groups(group_rows(table), layout, framed=False)
    got = [tf.train.SequenceExample.FromString(r) for r in records(encoded)]
    values = [
        [f.float_list.value[0] for f in e.feature_lists.feature_list["v"].feature] for e in got
    ]
    assert values == [[0.0, 3.0], [1.0], [2.0, 4.0]]
    assert "a" not in got[2].context.feature  # a null key is absent, not a zero
    assert stats.nulls["a"] == 1


LIST_TABLE = pa.table(
    {
        "session": pa.array(["s1", "s2", "s3", "s4"]),
        "events": pa.array(
            [
                [{"kind": "view", "ms": 10}, {"kind": None, "ms": 0}],
                [],
                None,
                [None, {"kind": "buy", "ms": None}],
            ],
            pa.list_(pa.struct([("kind", pa.string()), ("ms", pa.int64())])),
        ),
    }
)


def test_list_of_struct_column_maps_to_feature_lists():
    layout = plan(LIST_TABLE, column="events")
    assert [s.name for s in layout.steps] == ["events.kind", "events.ms"]
    encoded, stats = encode_list_column(LIST_TABLE, layout, SOURCE, 0)
    got = records(encoded)
    expected = []
    columns = LIST_TABLE.column("session").to_pylist(), LIST_TABLE.column("events").to_pylist()
    for session, events in zip(*columns, strict=True):
        e = tf.train.SequenceExample()
        e.context.feature["session"].bytes_list.value.append(session.encode())
        e.feature_lists.SetInParent()
        if events is not None:
            for field, kind in (("kind", "bytes"), ("ms", "int64")):
                feature_list = e.feature_lists.feature_list[f"events.{field}"]
                feature_list.SetInParent()
                for event in events:
                    f = feature_list.feature.add()
                    value = None if event is None else event[field]
                    if value is not None:
                        set_feature(f, kind, [value.encode() if kind == "bytes" else value])
        expected.append(e)
    assert got == [e.SerializeToString(deterministic=True) for e in expected]
    assert (stats.rows, stats.steps) == (4, 4)
    assert stats.nulls["events"] == 1  # s3: no feature list at all
    assert stats.nulls["events.kind"] == 2 and stats.nulls["events.ms"] == 2


def test_kernel_refuses_bad_group_offsets():
    column = KernelColumn("int64", "v", None, None, values=np.arange(3, dtype=np.int64))
    with pytest.raises(ValueError, match="group_off"):
        encode_sequences([], [column], np.array([1, 3]))
    buf, off = encode_sequences([], [column], np.array([0, 0, 3]))
    empty, full = (tf.train.SequenceExample.FromString(bytes(buf[a:b])) for a, b in
                   itertools.pairwise(off))  # fmt: skip
    assert len(empty.feature_lists.feature_list["v"].feature) == 0
    assert len(full.feature_lists.feature_list["v"].feature) == 3


def test_config_section_is_checked():
    assert parse_sequence({"group_by": "user", "order_by": "t"}, "c.yaml").group_by == ("user",)
    for raw, message in [
        ({"order_by": "t"}, "needs group_by"),
        ({"group_by": "u", "colum": "x"}, "sequence.colum' is unknown"),
        ({"group_by": ["u"], "context": ["u"]}, "in both group_by and context"),
        ({"column": "e", "group_by": "u"}, "takes no group_by"),
        ({"group_by": "u", "order_by": "u"}, "is a key"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_sequence(raw, "c.yaml")


def test_config_file_section_round_trips_through_the_manifest_form(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "input: x.parquet\noutput: out\n"
        "sequence: {group_by: [a, b], order_by: t, context: [c], features: [d]}\n",
        encoding="utf-8",
    )
    config = load_config(str(path), {})
    assert config.sequence == SequenceOptions(("a", "b"), "t", ("c",), ("d",))
    assert config_from_json(config_to_json(config), "manifest") == config
    path.write_text(
        "input: x.parquet\noutput: out\nsplit_key: c\nsequence: {group_by: a}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"split_key: 'c' is not a sequence\.group_by column"):
        load_config(str(path), {})


def test_plan_names_the_key_and_column():
    for options, message in [
        (SequenceOptions(group_by=("nope",)), r"sequence.group_by: \['nope'\] not among"),
        (SequenceOptions(group_by=("price",)), "sequence.group_by: column 'price' is float"),
        (SequenceOptions(group_by=("user",), order_by="tags"), "order_by: column 'tags'"),
        (SequenceOptions(column="page"), "sequence.column: column 'page' is string, not a list"),
        (SequenceOptions(group_by=("user",), features=("zz",)), r"features: \['zz'\]"),
    ]:
        with pytest.raises(SchemaError, match=message):
            plan(EVENTS, **dataclasses.asdict(options))


scalars = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    data=st.data(),
)
def test_random_groups_equal_protobuf(keys, data):
    n = len(keys)
    ints = data.draw(st.lists(scalars, min_size=n, max_size=n))
    floats = data.draw(
        st.lists(st.one_of(st.none(), st.floats(width=32, allow_nan=False)), min_size=n, max_size=n)
    )
    texts = data.draw(st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=n, max_size=n))
    lists = data.draw(
        st.lists(
            st.one_of(st.none(), st.lists(st.integers(-5, 300), max_size=4)), min_size=n, max_size=n
        )
    )
    order = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n))
    table = pa.table(
        {
            "key": pa.array(keys, pa.int64()),
            "order": pa.array(order, pa.int16()),
            "f_int": pa.array(ints, pa.int64()),
            "g_float": pa.array(floats, pa.float32()),
            "h_text": pa.array(texts, pa.string()),
            "i_list": pa.array(lists, pa.list_(pa.int64())),
        }
    )
    layout = plan(table, group_by=("key",), order_by="order")
    encoded, stats, bad = encode_groups(group_rows(table), layout, framed=False)
    assert bad == []
    expected = reference(table, python_groups(table, "key", "order"), layout)
    assert records(encoded) == [e.SerializeToString(deterministic=True) for e in expected]
    assert stats.steps == n


def test_keys_of_every_key_type_group_rows():
    day = datetime.date(2026, 12, 1)
    table = pa.table(
        {
            "date": pa.array([day, None, day, None]),
            "stamp": pa.array([5, 6, 5, 6], pa.timestamp("ms")),
            "flag": [True, False, True, False],
            "word": pa.array(["a", "b", "a", "b"]).dictionary_encode(),
            "v": pa.array([1, 2, 3, 4], pa.int16()),
        }
    )
    for key in ("date", "stamp", "flag", "word"):
        layout = plan(table, group_by=(key,))
        encoded, stats, bad = encode_groups(group_rows(table), layout, framed=False)
        got = [tf.train.SequenceExample.FromString(r) for r in records(encoded)]
        steps = [[f.int64_list.value[0] for f in e.feature_lists.feature_list["v"].feature]
                 for e in got]  # fmt: skip
        assert sorted(steps) == [[1, 3], [2, 4]], key
        assert not bad and stats.rows == 2
        hashes = key_hashes(table, [key], "salt")
        assert hashes[0] == hashes[2] and hashes[1] == hashes[3] and hashes[0] != hashes[1]
