"""SequenceExamples: the `sequence:` config section -> tf.train.SequenceExample records.

- `layout`: the section (`SequenceOptions`, `parse_sequence`) and its plan (`SequenceLayout`).
- `groups`: key hashes, the order of a sequence's rows, group bounds, the context check.
- `encode`: `encode_groups` (grouped rows) and `encode_list_column` (a list<struct> column),
  over the compiled kernel in transforms/encode/kernel/sequence.py.
- `spill`: rows spilled by bucket of their key, read back a bucket at a time.
- `beam`: `EncodeSequences`.
"""
