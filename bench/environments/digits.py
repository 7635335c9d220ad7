"""2-digit addition with a dense reward, for ``bench/scale.py``: random-weight models score on it from step 1.

Task: ``arithmetic``'s prompts (``<a>+<b>=``, operands 0-99). Reward: the share of the completion's characters
that are decimal digits (0.0 for an empty one), so a random model's completions differ within a group and every
step trains; exact match (``arithmetic``'s reward) gives a random model no signal at all, and the trainer skips a
batch without signal. The learning problem is beside the point here: the ladder times the steps.
"""

from __future__ import annotations

import random

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem


class DigitsEnv(QAEnv):
    name = "scale_digits"
    env_config_cls = BaseEnvConfig

    def generate_problem(self, rng: random.Random) -> QAItem:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return QAItem(prompt=f"{a}+{b}=", answer=str(a + b))

    def score_completion(self, text: str, answer: str) -> float:
        return sum(c.isdigit() for c in text) / len(text) if text else 0.0

    def max_completion_tokens(self) -> int:
        return 5  # as arithmetic's at 2 digits


if __name__ == "__main__":
    DigitsEnv.cli()
