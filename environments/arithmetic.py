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

import asyncio
import random
from functools import partial
from typing import Literal

from pydantic import Field

from hermes_nb.env import BaseEnv, BaseEnvConfig, QAItem, ScoredDataGroup, build_scored_group
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


class ArithmeticEnv(BaseEnv):
    name = "arithmetic"
    env_config_cls = ArithmeticConfig

    def __init__(self, config: ArithmeticConfig, *args: object, **kwargs: object) -> None:
        super().__init__(config, *args, **kwargs)  # type: ignore[arg-type]
        self.config: ArithmeticConfig = config
        self._rng = random.Random(config.seed)

    async def get_next_item(self) -> QAItem:
        return train_item(self._rng, self.config)

    async def collect_trajectories(self, item: QAItem) -> tuple[ScoredDataGroup | None, list[QAItem]]:
        completions = await self.server.sample(
            item.prompt,
            n=self.config.group_size,
            max_tokens=max_completion_tokens(self.config),
            temperature=self.config.temperature,
            stop=STOP,
        )
        scores = [score_completion(c.text, item.answer) for c in completions]
        self.percent_correct_buffer.extend(scores)
        group = build_scored_group(
            completions, scores, ensure_scores_are_not_same=self.config.ensure_scores_are_not_same
        )
        return group, []

    async def evaluate(self, *args: object, **kwargs: object) -> dict[str, float]:
        items = eval_items(self.config)
        limit = asyncio.Semaphore(self.config.max_eval_workers)

        async def greedy_score(item: QAItem) -> float:
            async with limit:
                [completion] = await self.server.sample(
                    item.prompt,
                    n=1,
                    max_tokens=max_completion_tokens(self.config),
                    temperature=0.0,
                    stop=STOP,
                )
            return score_completion(completion.text, item.answer)

        scores = await asyncio.gather(*(greedy_score(item) for item in items))
        return {"eval/percent_correct": sum(scores) / len(scores)}


if __name__ == "__main__":
    ArithmeticEnv.cli()
