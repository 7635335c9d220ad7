"""Environments written against verifiers (``verifiers.v1``), run as they are: ``adapter.py`` (the framework
contract), ``interpreter`` (the verifiers Python, checked), ``settings`` (the settings a selection shows, the
taskset's own config fields among them), ``schema_child`` (reads those fields in the verifiers Python) and
``episode_env`` (the environment process: verifiers runs the episodes, its train client samples from the run's
inference server, and the traces' exact tokens are what is trained)."""
