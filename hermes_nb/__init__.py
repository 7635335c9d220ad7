"""hermes-nb: RL training of language models on verifiable environments, from Jupyter."""

__version__ = "0.1.0"
