"""Training datums for backend tests: a prompt and a completion, trained on the completion only."""

from __future__ import annotations

from hermes_nb.trainer.types import Datum


def completion_datum(prompt: list[int], completion: list[int], advantage: float) -> Datum:
    """``prompt + completion`` shifted by one; weight 1 where the target is a completion token, logprob -3.0."""
    tokens = prompt + completion
    n = len(tokens) - 1
    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[1.0 if t + 1 >= len(prompt) else 0.0 for t in range(n)],
        sampling_logprobs_T=[-3.0] * n,
        advantages_T=[advantage] * n,
    )
