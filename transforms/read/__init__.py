"""Reading the sources: Parquet and CSV files -> `TableBatch` elements.

- `files`: opening an input on any Beam filesystem; `InputError`.
- `inputs`: matching the input patterns, the format, the one schema the files agree on.
- `work`: work items (a row group, a CSV file), read tasks, and reading one work item.
- `csv_reader`, `csv_bad_rows`, `parquet_reader`: the formats.
- `beam`: `ReadTable`, the PTransform.
"""
