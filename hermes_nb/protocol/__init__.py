"""Every record that crosses a process or HTTP boundary, defined once, one module per protocol.

- ``trajectory``: the Atropos trajectory-API wire format (scored groups, registrations, batches).
- ``inference``: the OpenAI-compatible and ``/generate`` inference wire format.
- ``metrics``: the metric keys and the per-step row written to ``metrics.jsonl`` and W&B.
- ``checkpoints``: one line of ``checkpoints.jsonl`` (a saved checkpoint) and the one reader of that file.
- ``run_layout``: the names of a run's files (the run directory and its logs) and ``RunPaths``.
"""
