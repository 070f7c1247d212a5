"""Writing: encoded batches of one split -> its final shard files.

- `tfrecord`: the TFRecord format (frame layout, masked crc32c, a frame reader).
- `compression`: names, levels, suffixes, the per-block gzip compressor.
- `sizing`: how many shards and which worker writes which rows (`plan_shards`).
- `files`: a shard file while it is written (`BlockFile`), a temp file (`ShardPart`), a final
  shard (`ShardFile`).
- `rolling`: the default write (each task's rows in files of the target size).
- `grouped`: `num_shards` and the seeded shuffle (pieces spilled, references meet by shard).
- `spill`: spill files of the grouped write (records stay out of the GroupByKey; bucket refs).
- `finalize`: temp files renamed into place, idempotently.
- `beam`: `WriteShards`.
- `names`: the sink names and the bad-row directory, without Beam (for the command line).
"""
