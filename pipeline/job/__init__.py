"""The job as it is defined before anything runs.

- `flags`: every option declared once (the command line's flags and the config's keys derive
  from it);
- `config`: `JobConfig`, the YAML file and the flags validated once (`load_config`);
- `dates`: `{date}` path templates of scheduled runs;
- `plan`: `plan_job`, the side-effect-free plan (inputs, schema, features, splits, shards,
  work items) every engine runs;
- `errors`: `ConfigError` and `closest`.

May import: pipeline.output (the drift check and layout checks at plan time) and transforms/.
Writes nothing.
"""
