"""The machinery of one run, driven by ``pipeline.run_pipeline`` (the public face).

- ``prepare``: claim selection, the pre-flight check of every model and backend, the
  effective config and the run's fingerprint;
- ``state``: ``RunState`` (config, claims, stage files, reporter) and ``StopPoints``;
- ``waves``: an LLM stage wave by wave, a failing wave split in halves;
- ``stages``: one function per stage, the name → function table, the budgeted order;
- ``overlap``: stages 1+2 overlapped; ``followup_round``: the optional follow-up round;
- ``upstream``: a prediction completed with the timings and flags of the stages before it;
- ``fallbacks``: the record a claim gets when its model call fails;
- ``ray_engine``, ``ray_tasks``: ``--engine ray``, the LLM waves on model-holding Ray actors and
  retrieval as Ray tasks (the only modules that import Ray).
"""
