"""hermes-nb's own environments (``hermes_nb.env``'s ``BaseEnv``, ``QAEnv``, ``AgentEnv``): ``adapter.py``."""
