"""Answer an open question well: scored by a judge model, since no checker can decide what a good answer is.

Task: the prompt asks for a one-line answer to an open request ("Give a name for a bakery that sells only
bread", "Describe the sea in five words"); many answers are good, none is the answer.
Reward: a judge model's score in [0, 1] against ``rubric`` (``hermes_nb.env.judge``): each completion alone
(``judge_mode: absolute``) or the group ranked together (``relative``, as ART's RULER). The judge is any
OpenAI-compatible endpoint: ``judge_base_url`` / ``judge_model`` / ``judge_api_key_env`` (a variable in
``~/.hermes/.env``); unset, the run's own policy judges (a chat model that can answer JSON; the embedded base
model cannot, so name a judge with it, or every group fails). A judge that fails (after its retries) or answers
malformed JSON fails the group (``env/failed_groups``), never the run. Its calls and tokens are in
``env/judge_calls`` and ``env/judge_*_tokens``; its reason for each score is in the rollout viewer.
Eval: the held-out requests answered greedily, judged absolutely; ``eval/percent_correct`` is the share scored at
least ``correct_threshold``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Literal

from pydantic import Field

from hermes_nb.env import APIServerConfig, BaseEnvConfig, QAEnv, QAItem
from hermes_nb.env.judge import Judge, Verdict, with_judge_reasons
from hermes_nb.env.scoring import with_single_turn_messages
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT
from hermes_nb.protocol.trajectory import ScoredDataGroup

# 40 requests: enough that the hash split holds some out (4 of them) and leaves the rest to train on.
THINGS = (
    "bakery that sells only bread",
    "cat that never sleeps",
    "river in a desert",
    "library on the moon",
    "tea shop for robots",
    "museum of lost socks",
    "bicycle made of glass",
    "garden under the sea",
    "clock that runs backwards",
    "village in the clouds",
)
REQUESTS = (
    "Give a name for a {}.",
    "Describe a {} in five words.",
    "Write a one-line slogan for a {}.",
    "Invent a motto for a {}.",
)


class OpenAnswerConfig(BaseEnvConfig):
    rubric: str = Field(
        default="A good answer does what the request asks, in one line, and is specific and vivid.",
        description="What the judge scores each answer against.",
    )
    judge_mode: Literal["absolute", "relative"] = Field(
        default="relative", description="absolute: each answer alone; relative: the group ranked together (RULER)."
    )
    judge_base_url: str | None = Field(
        default=None, description="The judge's OpenAI-compatible /v1 URL (None: the run's own policy judges)."
    )
    judge_model: str | None = Field(default=None, description="The judge's model name (None: the endpoint's own).")
    judge_api_key_env: str | None = Field(
        default=None, description="The variable holding the judge's key (read from ~/.hermes/.env); None: no key."
    )
    judge_retries: int = Field(default=2, ge=0, le=10, description="Tries after the first before a group fails.")
    correct_threshold: float = Field(default=0.5, ge=0, le=1, description="The judge's score counted correct.")


class OpenAnswerEnv(QAEnv):
    name = "open_answer"
    env_config_cls = OpenAnswerConfig
    config: OpenAnswerConfig

    def __init__(self, config: OpenAnswerConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.judge = Judge(self._judge_endpoint(), retries=config.judge_retries)

    def _judge_endpoint(self) -> APIServerConfig:
        policy = self.server_configs[0]
        config = self.config
        return policy.model_copy(
            update={
                "base_url": config.judge_base_url or policy.base_url,
                "model_name": config.judge_model or policy.model_name,
                "api_key_env": config.judge_api_key_env if config.judge_base_url else policy.api_key_env,
            }
        )

    def generate_problem(self, rng: random.Random) -> QAItem:
        return QAItem(prompt=rng.choice(REQUESTS).format(rng.choice(THINGS)) + "\n", answer="")

    def max_completion_tokens(self) -> int:
        return 24  # one line

    def is_correct(self, score: float) -> bool:
        return score >= self.config.correct_threshold

    async def judged(self, task: str, texts: list[str]) -> list[Verdict]:
        """The judge's verdicts on ``texts``, as ``judge_mode`` asks."""
        if self.config.judge_mode == "relative":
            return await self.judge.rank(task, texts, self.config.rubric)
        return list(await asyncio.gather(*(self.judge.score(task, t, self.config.rubric) for t in texts)))

    async def collect_trajectories(self, item: QAItem) -> tuple[ScoredDataGroup | None, list[QAItem]]:
        completions = await self.sample_group(item)
        verdicts = await self.judged(item.prompt, [c.text for c in completions])
        group = self.scored_group(completions, [v.score for v in verdicts])
        group = with_single_turn_messages(group, item.prompt, completions)
        return with_judge_reasons(group, verdicts), []

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        items = self.eval_items()
        batch = await self.server.sample_batch(
            [item.prompt for item in items], max_tokens=self.max_completion_tokens(), temperature=0.0, stop=self.stop
        )
        verdicts = await asyncio.gather(
            *(
                self.judge.score(i.prompt, c.text, self.config.rubric)
                for i, c in zip(items, batch.completions, strict=True)
            )
        )
        return {EVAL_PERCENT_CORRECT: sum(self.is_correct(v.score) for v in verdicts) / len(verdicts)}

    async def wandb_log(self, wandb_metrics: dict[str, float] | None = None) -> dict[str, float]:
        return {**(wandb_metrics or {}), **self.judge.metrics()}


if __name__ == "__main__":
    OpenAnswerEnv.cli()
