"""`tf.train.Example` and `tf.train.SequenceExample` as protobuf message classes, built from
their schema with protobuf alone, so `inspect` and `verify` decode records without importing
TensorFlow.

The schema is TensorFlow's `example.proto` and `feature.proto` (package `tensorflow`): the same
field numbers, types and packing, so a record parses here exactly as `tf.train.Example` parses
it (tests/test_startup.py compares the two on every record of an output). The classes live in a
pool of their own: TensorFlow, when a process also imports it, registers its own.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

__all__ = ["DecodeError", "Example", "Feature", "Features", "SequenceExample"]

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    *,
    repeated: bool = False,
    type_name: str | None = None,
    oneof: int | None = None,
) -> None:
    field = message.field.add(name=name, number=number, type=kind)
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name is not None:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof


def _map_message(
    proto: descriptor_pb2.FileDescriptorProto, name: str, field: str, entry: str, value: str
) -> None:
    """`message <name> { map<string, <value>> <field> = 1; }`, as protoc writes a map: a
    repeated nested `<entry>` message with the map_entry option."""
    message = proto.message_type.add(name=name)
    nested = message.nested_type.add(name=entry)
    nested.options.map_entry = True
    _field(nested, "key", 1, _F.TYPE_STRING)
    _field(nested, "value", 2, _F.TYPE_MESSAGE, type_name=value)
    type_name = f".tensorflow.{name}.{entry}"
    _field(message, field, 1, _F.TYPE_MESSAGE, repeated=True, type_name=type_name)


def _schema() -> descriptor_pb2.FileDescriptorProto:
    """example.proto and feature.proto in one file: the messages of a tf.train.Example."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfrecord_etl/example.proto", package="tensorflow", syntax="proto3"
    )
    for name, kind in (
        ("BytesList", _F.TYPE_BYTES),
        ("FloatList", _F.TYPE_FLOAT),  # proto3: repeated numbers are packed
        ("Int64List", _F.TYPE_INT64),
    ):
        _field(proto.message_type.add(name=name), "value", 1, kind, repeated=True)
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in enumerate(("bytes_list", "float_list", "int64_list"), 1):
        type_name = ".tensorflow." + {1: "BytesList", 2: "FloatList", 3: "Int64List"}[number]
        _field(feature, name, number, _F.TYPE_MESSAGE, type_name=type_name, oneof=0)
    _map_message(proto, "Features", "feature", "FeatureEntry", ".tensorflow.Feature")
    example = proto.message_type.add(name="Example")
    _field(example, "features", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features")
    feature_list = proto.message_type.add(name="FeatureList")
    _field(
        feature_list, "feature", 1, _F.TYPE_MESSAGE, repeated=True, type_name=".tensorflow.Feature"
    )
    _map_message(
        proto, "FeatureLists", "feature_list", "FeatureListEntry", ".tensorflow.FeatureList"
    )
    sequence = proto.message_type.add(name="SequenceExample")
    _field(sequence, "context", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features")
    _field(sequence, "feature_lists", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.FeatureLists")
    return proto


def _classes() -> tuple[type[Message], ...]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_schema())
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
        for name in ("Example", "Features", "Feature", "SequenceExample")
    )


Example, Features, Feature, SequenceExample = _classes()
