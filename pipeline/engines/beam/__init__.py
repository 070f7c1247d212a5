"""The Beam engine (any runner).

- `engine`: `BeamEngine`, the engine interface over a Beam pipeline;
- `build`: `build_pipeline`, the one map of the Beam job (read -> split -> preprocess -> encode
  -> write -> manifest);
- `options`: Beam's options from the command line (the default runner, the Dask alias), and the
  flags no Beam option takes;
- `dataflow`: what Dataflow needs filled in, and what a dry run built; `follow`: a Dataflow
  job's id, console URL and state;
- `dask_runner`: Beam's DaskRunner with the gaps this job falls into closed.

Imports Beam. May import: pipeline.engines (interface, finish), pipeline.job, pipeline.output,
transforms/.
"""
