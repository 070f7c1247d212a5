"""The command line: what a person types and reads.

- `main`: argument parsing (`tfrecord-etl convert|plan|inspect|verify|report`), each job flag
  declared once (pipeline/job/flags.py); unknown flags go to Beam's options;
- `convert`: the `convert` command: config, plan, engine, the output claimed, the run, summary;
- `backfill`: `convert --dates A..B`, one `convert --date` process per date;
- `incremental`: `convert --incremental`, a new span of the inputs new since the last run;
- `commands`: `plan`, `inspect` and `verify`, the commands that run no job;
- `plan_summary`: what `plan` prints; `summary`: the JSON summary line of a run;
- `errors`: exit codes and the one-line error message; `joblog`: the stderr lines (text, JSON,
  quiet); `progress`: the live progress line of a local run.

May import every other room; no room imports this one. `--help` imports neither Beam nor
TensorFlow: each command imports what it needs when it runs.
"""
