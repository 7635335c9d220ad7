"""``QAEnv``: the environment for prompt → one checkable answer, with sampling, scoring and evaluation shared.

A subclass says only how its items are made and checked: ``train_item`` (from ``self.rng``), ``eval_items``
(held-out, never training items), ``max_completion_tokens`` and, when exact match is not the rule,
``score_completion``. Training samples ``group_size`` completions per prompt at ``config.temperature``; the
evaluation is greedy over the held-out items, ``max_eval_workers`` requests at a time, and reports
``eval/percent_correct``.
"""

from __future__ import annotations

import asyncio
import random
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.config import APIServerConfig, BaseEnvConfig
from hermes_nb.env.scoring import build_scored_group
from hermes_nb.env.types import QAItem
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT
from hermes_nb.protocol.trajectory import ScoredDataGroup


class QAEnv(BaseEnv):
    # Completions end at the end-of-sequence token; a newline is a second, tokenizer-independent stop.
    stop: ClassVar[list[str]] = ["\n"]

    def __init__(
        self,
        config: BaseEnvConfig,
        server_configs: Sequence[APIServerConfig] | None = None,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        self.rng = random.Random(config.seed)

    @abstractmethod
    def train_item(self) -> QAItem:
        """The next training item, drawn from ``self.rng``."""

    @abstractmethod
    def eval_items(self) -> list[QAItem]:
        """The held-out items of one evaluation (the same every time)."""

    @abstractmethod
    def max_completion_tokens(self) -> int:
        """Enough for the longest answer and the end-of-sequence token."""

    def score_completion(self, text: str, answer: str) -> float:
        """1.0 for exactly the answer (surrounding whitespace ignored), else 0.0."""
        return 1.0 if text.strip() == answer else 0.0

    async def get_next_item(self) -> QAItem:
        return self.train_item()

    async def collect_trajectories(self, item: QAItem) -> tuple[ScoredDataGroup | None, list[QAItem]]:
        completions = await self.server.sample(
            item.prompt,
            n=self.config.group_size,
            max_tokens=self.max_completion_tokens(),
            temperature=self.config.temperature,
            stop=self.stop,
        )
        scores = [self.score_completion(c.text, item.answer) for c in completions]
        self.percent_correct_buffer.extend(scores)
        group = build_scored_group(
            completions, scores, ensure_scores_are_not_same=self.config.ensure_scores_are_not_same
        )
        return group, []

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        items = self.eval_items()
        limit = asyncio.Semaphore(self.config.max_eval_workers)

        async def greedy_score(item: QAItem) -> float:
            async with limit:
                [completion] = await self.server.sample(
                    item.prompt, n=1, max_tokens=self.max_completion_tokens(), temperature=0.0, stop=self.stop
                )
            return self.score_completion(completion.text, item.answer)

        scores = await asyncio.gather(*(greedy_score(item) for item in items))
        return {EVAL_PERCENT_CORRECT: sum(scores) / len(scores)}
