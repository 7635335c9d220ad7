"""Environments written against OpenEnv, run as they are: ``adapter.py`` (the framework contract), ``settings``
(the episode settings a selection shows), ``session`` (OpenEnv's WebSocket session, spoken from the environment
process), ``server`` and ``app_main`` (the OpenEnv server a run starts), ``rewards`` (per-step rewards to an
episode's score) and ``episode_env`` (the environment process: episodes through ``AgentEnv``'s exact tokens)."""
