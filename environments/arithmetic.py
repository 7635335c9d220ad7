"""Arithmetic on two whole numbers: answer "12+34=" with "46" (addition, subtraction, or both mixed).

Task: the prompt is ``<a><op><b>=`` with operands of at most ``digits`` digits; ``op`` is ``+`` or ``-`` as
``operation`` says (``add``, ``sub``, or ``mixed`` = either, half and half). Subtraction puts the larger
operand first, so every answer is a non-negative number.
Reward: 1.0 when the completion, stripped of surrounding whitespace, is exactly the answer in decimal without
leading zeros ("046" and "46 apples" score 0.0); 0.0 otherwise.
Eval: greedy (temperature 0) accuracy over ``eval_items`` held-out problems, whose prompts hash into the
held-out split (``hermes_nb.env.splits``) and are therefore never training items; reported as
``eval/percent_correct``.
Transfer: ``operation: add`` as task A and ``operation: mixed`` (or ``sub``) as task B; the embedded base
model was pretrained on both, so B starts above zero.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Literal

from pydantic import Field

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem
from hermes_nb.env.splits import draw_item, heldout_items

# Completions end at the end-of-sequence token; a newline is a second, tokenizer-independent stop.
STOP = ["\n"]

Operation = Literal["add", "sub", "mixed"]


class ArithmeticConfig(BaseEnvConfig):
    digits: int = Field(default=2, ge=1, le=6, description="Operands have at most this many digits.")
    operation: Operation = Field(default="add", description="add, sub, or mixed (either, half and half).")


def generate_problem(rng: random.Random, config: ArithmeticConfig) -> QAItem:
    """One problem from ``rng``, on either side of the train/held-out split."""
    high = 10**config.digits - 1
    a, b = rng.randint(0, high), rng.randint(0, high)
    op = config.operation
    if op == "mixed":
        op = rng.choice(("add", "sub"))
    if op == "add":
        return QAItem(prompt=f"{a}+{b}=", answer=str(a + b))
    a, b = max(a, b), min(a, b)
    return QAItem(prompt=f"{a}-{b}=", answer=str(a - b))


def train_item(rng: random.Random, config: ArithmeticConfig) -> QAItem:
    return draw_item(partial(generate_problem, config=config), rng, "train")


def eval_items(config: ArithmeticConfig) -> list[QAItem]:
    generate = partial(generate_problem, config=config)
    return heldout_items(generate, config.eval_items, seed=config.seed, task_name=ArithmeticEnv.name or "")


def score_completion(text: str, answer: str) -> float:
    return 1.0 if text.strip() == answer else 0.0


def max_completion_tokens(config: ArithmeticConfig) -> int:
    # The longest answer (a carry adds a digit), the end-of-sequence token, and one spare to fail fast.
    return config.digits + 3


class ArithmeticEnv(QAEnv):
    name = "arithmetic"
    env_config_cls = ArithmeticConfig
    config: ArithmeticConfig

    def train_item(self) -> QAItem:
        return train_item(self.rng, self.config)

    def eval_items(self) -> list[QAItem]:
        return eval_items(self.config)

    def max_completion_tokens(self) -> int:
        return max_completion_tokens(self.config)

    def score_completion(self, text: str, answer: str) -> float:
        return score_completion(text, answer)


if __name__ == "__main__":
    ArithmeticEnv.cli()
