"""Running a planned job: one interface, two engines.

- `interface`: `Engine`, `RunContext`, `EngineResult` (a `JobPlan` in, a result out);
- `choose`: which engine runs a job (`--engine auto|beam|in-process`) and why;
- `launch`: what is done once per run whatever the engine: the lease, clearing the output;
- `inprocess`: the in-process engine (no Beam);
- `beam/`: the Beam engine (`build.py`, the one map of the Beam job; options; Dataflow and Dask
  glue);
- `finish`: the job's last step in either engine (bad-row limits, layouts, schema, manifest).

May import: pipeline.job, pipeline.output and transforms/. Nothing here prints to the user:
events go to the launcher's log (`RunContext.log`), failures are exceptions.
"""
