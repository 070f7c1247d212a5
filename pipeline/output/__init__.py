"""The output directory: what the job writes beside the records, and the one place that
touches the directory's entries.

- `manifest`: the typed manifest (`Manifest`), the contract between writer and readers;
  `checks`: what its JSON passes before it is read; `sequence`: its `sequence` section;
- `entries`: the one rule for the directory's entries: nothing inside an output is followed
  through a link; `directory`: checking and clearing an output before a run, and what a
  failed run cleared and left;
- `lease`: one run at a time writes an output (`_LEASE`);
- `schema`: `schema.pbtxt`; `drift`: the schema-drift gate; `layouts/`: TFDS and TFX metadata;
- `dataset/`: an incremental dataset: its spans, the ledger of their inputs (dataset.json), and
  the dataset read as one output.

May import: transforms/ only. Every other room reads and writes an output through here.
"""
