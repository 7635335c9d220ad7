"""``QAEnv``: the environment for prompt → one checkable answer, with sampling, scoring and evaluation shared.

A subclass says only how its items are made and checked: ``generate_problem`` (one problem from an RNG, on
either side of the train/held-out split), ``max_completion_tokens`` and, when exact match is not the rule,
``score_completion``, with ``is_correct`` when a correct answer does not score 1.0 (partial credit is not
correct); ``score_item`` instead where scoring needs more of the item than its answer (its ``metadata``).
``train_item`` draws training items from ``self.rng`` (seeded with ``config.seed``) and ``eval_items`` the
held-out ones, both from ``hermes_nb.env.splits.GeneratedItems`` (shared with ``AgentEnv``), so no held-out
prompt is ever trained on. Training samples ``group_size`` completions per prompt at ``config.temperature``;
the evaluation is greedy over the held-out items, sent as a few multi-prompt requests (``eval_chunk_size``
prompts each, ``max_eval_workers`` at a time), and reports ``eval/percent_correct`` (the share ``is_correct``
judges correct) and, when the server says which weights answered, ``eval/policy_step``.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from typing import Any, ClassVar

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.scoring import with_single_turn_messages
from hermes_nb.env.splits import GeneratedItems
from hermes_nb.env.types import QAItem, SampledBatch, SampledCompletion
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT, EVAL_POLICY_STEP
from hermes_nb.protocol.trajectory import ScoredDataGroup


class QAEnv(GeneratedItems, BaseEnv):
    # Completions end at the end-of-sequence token; a newline is a second, tokenizer-independent stop.
    stop: ClassVar[list[str]] = ["\n"]
    # Held-out prompts per evaluation request. The server samples a request as one batch from one policy
    # version, so with the default 200 items an evaluation measures exactly one set of weights, even while the
    # trainer keeps publishing; and one batched greedy pass is ~20x faster than a request per item.
    eval_chunk_size: ClassVar[int] = 256

    @abstractmethod
    def max_completion_tokens(self) -> int:
        """Enough for the longest answer and the end-of-sequence token."""

    def score_completion(self, text: str, answer: str) -> float:
        """1.0 for exactly the answer (surrounding whitespace ignored), else 0.0."""
        return 1.0 if text.strip() == answer else 0.0

    def score_item(self, text: str, item: QAItem) -> float:
        """The score of ``text`` as a completion of ``item``: ``score_completion`` of its answer, unless overridden."""
        return self.score_completion(text, item.answer)

    async def sample_group(self, item: QAItem) -> list[SampledCompletion]:
        """``group_size`` completions of ``item``'s prompt at the training temperature."""
        return await self.server.sample(
            item.prompt,
            n=self.config.group_size,
            max_tokens=self.max_completion_tokens(),
            temperature=self.config.temperature,
            stop=self.stop,
        )

    async def collect_trajectories(self, item: QAItem) -> tuple[ScoredDataGroup | None, list[QAItem]]:
        completions = await self.sample_group(item)
        scores = [self.score_item(c.text, item) for c in completions]
        return with_single_turn_messages(self.scored_group(completions, scores), item.prompt, completions), []

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        items = self.eval_items()
        chunks = [items[i : i + self.eval_chunk_size] for i in range(0, len(items), self.eval_chunk_size)]
        limit = asyncio.Semaphore(self.config.max_eval_workers)

        async def greedy(chunk: list[QAItem]) -> SampledBatch:
            async with limit:
                return await self.server.sample_batch(
                    [item.prompt for item in chunk],
                    max_tokens=self.max_completion_tokens(),
                    temperature=0.0,
                    stop=self.stop,
                )

        batches = await asyncio.gather(*(greedy(chunk) for chunk in chunks))
        correct = [
            self.is_correct(self.score_item(completion.text, item))
            for batch, chunk in zip(batches, chunks, strict=True)
            for completion, item in zip(batch.completions, chunk, strict=True)
        ]
        results = {EVAL_PERCENT_CORRECT: sum(correct) / len(correct)}
        versions = [batch.policy_version for batch in batches if batch.policy_version is not None]
        if versions:
            # Several chunks may straddle a weight update: name the newest, so no result is credited early.
            results[EVAL_POLICY_STEP] = float(max(versions))
        return results
