"""The grouped write (`num_shards` > 0, or a shuffle): every batch is cut into one piece per shard,
the pieces of a shard meet on one worker, which writes them in a stable order (their origin), or,
with a seed, in the order of a seeded hash of each record (a global shuffle).

The records do not cross the GroupByKey: `ToShardsFn` writes them to spill files in the temp
directory (spill.py) and sends (shard, where they lie). With a shuffle each shard's key range is
cut into buckets and a batch's records are spilled by bucket, so `WriteShardFn` reads, sorts and
writes a group of buckets (about SORT_BYTES) at a time, in key order: memory is bounded by the
group, not by the shard, and the output is the same as sorting the whole shard by key.

Modules: `records` (shard ids, shuffle keys, gathering, block runs: numpy and numba), `spill`
(the spill files and their references), `pieces` (the two halves as plain code: `ShardSpiller`,
`write_shard`), `slices` (a shuffled shard written by several workers at once, then joined:
the in-process engine), `beam` (the DoFns over them).
"""
