"""Reading the sources: Parquet, CSV and JSON Lines files -> `TableBatch` elements.

- `files`: opening an input on any Beam filesystem; `InputError`; configured column types.
- `inputs`: matching the input patterns (a directory: the files below it), the format, the one
  schema the files agree on.
- `partitions`: Hive partitions, the `key=value` directories of a path as typed columns.
- `work`: work items (a row group, a CSV or JSON Lines file, a byte range of a large CSV file),
  read tasks, and reading one work item (with its partition columns).
- `delimited` (CSV: the reader, its bad rows, byte ranges), `json_reader`, `parquet_reader`:
  the formats.
- `beam`: `ReadTable`, the PTransform.
"""
