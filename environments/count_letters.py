"""Count one letter in a string: answer "count:a:banana=" with "3".

Task: the prompt is ``count:<c>:<s>=`` where ``s`` has ``min_length`` to ``max_length`` letters drawn from the
first ``alphabet_size`` letters of a-z and ``c`` is one of those letters (it may not occur: the answer is
then 0).
Reward: 1.0 when the completion, stripped of surrounding whitespace, is exactly the count in decimal; 0.0
otherwise (``QAEnv``'s exact match).
Eval: greedy (temperature 0) accuracy over ``eval_items`` held-out problems, whose prompts hash into the
held-out split (``hermes_nb.env.splits``) and are therefore never training items; reported as
``eval/percent_correct``.
"""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


class CountLettersConfig(BaseEnvConfig):
    min_length: int = Field(default=4, ge=1, le=20, description="Shortest string.")
    max_length: int = Field(default=8, ge=1, le=20, description="Longest string.")
    # Few letters make counts above one common; with all 26 most answers would be 0 or 1.
    alphabet_size: int = Field(default=4, ge=2, le=26, description="Letters drawn from the first N of a-z.")

    @model_validator(mode="after")
    def _lengths_ordered(self) -> CountLettersConfig:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length: {self.min_length} is above max_length {self.max_length}")
        return self


class CountLettersEnv(QAEnv):
    name = "count_letters"
    env_config_cls = CountLettersConfig
    config: CountLettersConfig

    def generate_problem(self, rng: random.Random) -> QAItem:
        config = self.config
        letters = ALPHABET[: config.alphabet_size]
        text = "".join(rng.choice(letters) for _ in range(rng.randint(config.min_length, config.max_length)))
        target = rng.choice(letters)
        return QAItem(prompt=f"count:{target}:{text}=", answer=str(text.count(target)))

    def max_completion_tokens(self) -> int:
        # At most two digits (max_length <= 20), the end-of-sequence token, and one spare to fail fast.
        return 4


if __name__ == "__main__":
    CountLettersEnv.cli()
