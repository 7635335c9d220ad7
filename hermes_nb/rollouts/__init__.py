"""The rollout viewer's core: the sampled conversations of a run's step, with scores and advantages.

``reader`` reads them from the run's ``trajectories.jsonl.gz``; ``samples`` holds the typed result with its text
and HTML forms (``render`` draws a conversation, tool calls and results included); ``api`` is ``rl_get_samples``.
"""
