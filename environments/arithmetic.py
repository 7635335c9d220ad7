"""Arithmetic on two whole numbers: answer "12+34=" with "46" (addition, subtraction, or both mixed).

Task: the prompt is ``<a><op><b>=`` with operands of at most ``digits`` digits; ``op`` is ``+`` or ``-`` as
``operation`` says (``add``, ``sub``, or ``mixed`` = either, half and half). Subtraction puts the larger
operand first, so every answer is a non-negative number.
Reward: 1.0 when the completion, stripped of surrounding whitespace, is exactly the answer in decimal without
leading zeros ("046" and "46 apples" score 0.0); 0.0 otherwise (``QAEnv``'s exact match).
Eval: greedy (temperature 0) accuracy over ``eval_items`` held-out problems, whose prompts hash into the
held-out split (``hermes_nb.env.splits``) and are therefore never training items; reported as
``eval/percent_correct``.
Transfer: ``operation: add`` as task A and ``operation: mixed`` (or ``sub``) as task B; the embedded base
model was pretrained on both, so B starts above zero.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem

Operation = Literal["add", "sub", "mixed"]


class ArithmeticConfig(BaseEnvConfig):
    digits: int = Field(default=2, ge=1, le=6, description="Operands have at most this many digits.")
    operation: Operation = Field(default="add", description="add, sub, or mixed (either, half and half).")


class ArithmeticEnv(QAEnv):
    name = "arithmetic"
    env_config_cls = ArithmeticConfig
    config: ArithmeticConfig

    def generate_problem(self, rng: random.Random) -> QAItem:
        high = 10**self.config.digits - 1
        a, b = rng.randint(0, high), rng.randint(0, high)
        op = self.config.operation
        if op == "mixed":
            op = rng.choice(("add", "sub"))
        if op == "add":
            return QAItem(prompt=f"{a}+{b}=", answer=str(a + b))
        a, b = max(a, b), min(a, b)
        return QAItem(prompt=f"{a}-{b}=", answer=str(a - b))

    def max_completion_tokens(self) -> int:
        # The longest answer (a carry adds a digit), the end-of-sequence token, and one spare to fail fast.
        return self.config.digits + 3


if __name__ == "__main__":
    ArithmeticEnv.cli()
