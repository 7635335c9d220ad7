"""Reverse a string of letters: answer "rev:abc=" with "cba".

Task: the prompt is ``rev:<s>=`` where ``s`` has ``min_length`` to ``max_length`` letters drawn from the first
``alphabet_size`` letters of a-z.
Reward: 1.0 when the completion, stripped of surrounding whitespace, is exactly ``s`` reversed; 0.0 otherwise
(``QAEnv``'s exact match: case and every letter count).
Eval: greedy (temperature 0) accuracy over ``eval_items`` held-out strings, whose prompts hash into the
held-out split (``hermes_nb.env.splits``) and are therefore never training items; reported as
``eval/percent_correct``.
"""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


class ReverseStringConfig(BaseEnvConfig):
    min_length: int = Field(default=3, ge=1, le=20, description="Shortest string.")
    max_length: int = Field(default=5, ge=1, le=20, description="Longest string.")
    alphabet_size: int = Field(default=26, ge=2, le=26, description="Letters drawn from the first N of a-z.")

    @model_validator(mode="after")
    def _lengths_ordered(self) -> ReverseStringConfig:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length: {self.min_length} is above max_length {self.max_length}")
        return self


class ReverseStringEnv(QAEnv):
    name = "reverse_string"
    env_config_cls = ReverseStringConfig
    config: ReverseStringConfig

    def generate_problem(self, rng: random.Random) -> QAItem:
        config = self.config
        letters = ALPHABET[: config.alphabet_size]
        text = "".join(rng.choice(letters) for _ in range(rng.randint(config.min_length, config.max_length)))
        return QAItem(prompt=f"rev:{text}=", answer=text[::-1])

    def max_completion_tokens(self) -> int:
        # The longest answer, the end-of-sequence token, and one spare to fail fast.
        return self.config.max_length + 2


if __name__ == "__main__":
    ReverseStringEnv.cli()
