"""The compiled encoder kernel (numba): one call per batch writes every record of every column.

`example.encode_records` is the entry point; `layout.plan` is its first pass (per column a write
mode and header templates, per record its size), `wire` the protobuf wire helpers, `crc` the
crc32c of TFRecord frames, `memory` the raw loads and stores by address.
"""
