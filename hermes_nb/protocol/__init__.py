"""Every record that crosses a process or HTTP boundary, and every file format of the run directory, defined
once, one module per protocol. Nothing here knows the machine (no home, no OS): every process reads these.

- ``trajectory``: the Atropos trajectory-API wire format (scored groups, registrations, batches).
- ``inference``: the OpenAI-compatible and ``/generate`` inference wire format.
- ``tool_calls``: tool calls in a model's text (the Hermes format).
- ``metrics``: the metric keys and the per-step row written to ``metrics.jsonl`` and W&B.
- ``checkpoints``: one line of ``checkpoints.jsonl`` (a saved checkpoint) and the one reader of that file.
- ``recorded_batches``: ``trajectories.jsonl.gz``, the batches a run trained on.
- ``run_state``: ``run.json``, a run's status and processes.
- ``sweep_state``: ``sweep.json``, a sweep's variants, their runs, its stop rule and its driver.
- ``run_files``: the names of a run's files (the run directory and its logs) and ``RunPaths``.
- ``tinker``: the Tinker side of a run (``tinker.json``, checkpoints' ``tinker://`` paths).
- ``auth``: the per-run secret's check; ``redaction``: how a secret is hidden.
"""
