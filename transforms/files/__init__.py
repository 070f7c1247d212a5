"""Columns of file references read into the records (`files:` in the config): a path or URI
becomes the file's bytes; an image is checked, and resized and re-encoded when asked; an audio
file's header is read. Plain functions, without Beam; `beam.py` wires them:

- `options.py`: the config section, checked without a schema;
- `plan.py`: the columns over the schema (what they become), the manifest's image marking,
  the plan's estimate of the file bytes;
- `fetch.py`: references resolved (relative to the table) and read, bounded in size;
- `image.py`, `audio.py`: what an image or audio file is checked and turned into;
- `stage.py`: a batch's files read on threads, in parts of bounded size, bad files as bad rows;
- `local_reads.py`: local files kept as bytes read by a compiled loop into a part's buffers;
- `beam.py`: `ReadFiles`.
"""
