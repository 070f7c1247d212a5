"""CSV files: `reader` (pyarrow's streaming reader, the schema, bad rows), `bad_rows` (where
pyarrow skipped a row, a block converted column by column), `ranges` (a large CSV or JSON Lines
file cut into byte ranges at row boundaries, read by several workers), `scan` (where the rows
start in a file's bytes)."""
