"""``AgentEnv``: multi-turn episodes with tool calls on a chat model, scored on their final answer.

A subclass says what the task is: ``generate_problem`` (a question and its final answer, on either side of the
train/held-out split of ``hermes_nb.env.splits``), ``tools`` (what the policy may call) and ``call_tool`` (the
result text the policy sees; a bad call should return an error text, as a real tool would). Optionally a
``system_prompt``, other ``initial_messages``, and ``score_episode`` / ``is_correct`` when exact match of the final
answer is not the rule.

``collect_trajectories`` plays ``group_size`` episodes of one item (``hermes_nb.env.episodes``): the first turn
of all of them is one request with ``n = group_size``, then each episode goes on by itself: every tool call it
makes is answered by ``call_tool`` (a ``tool`` message with the call's id), and it is asked again, until a turn
without tool calls (the final answer), ``max_turns`` turns, or the token budget (``max_token_length``). Each
episode is one sequence of the group: its tokens are the exact transcript, trained only where the policy sampled.
An episode that raises (a tool that fails, a template that cannot extend) is counted (``env/failed_episodes``),
logged and left out of its group; with fewer than two episodes left the group is skipped, and when none is left
the error is raised (the host counts the group as failed). An episode that uses all ``max_turns`` turns
without answering scores as ``score_episode`` says (0.0 by default) and is counted (``env/turn_limit_episodes``).
``evaluate`` plays one greedy episode per held-out item, ``eval_chunk_size`` items at a time and
``max_eval_workers`` chunks at once, and reports ``eval/percent_correct`` (and ``eval/policy_step`` when the
server says which weights answered).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from hermes_nb.config import EMBEDDED_CHAT_MODEL, BaseEnvConfig, EnvironmentNeeds
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.chat_render import ChatRenderer, load_chat_renderer
from hermes_nb.env.episodes import Episode, ask_all
from hermes_nb.env.scoring import with_episode_messages
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.splits import GeneratedItems
from hermes_nb.env.types import QAItem
from hermes_nb.errors import ConfigError, EnvironmentGone
from hermes_nb.protocol.inference import MAX_NEW_TOKENS, ChatMessage, FunctionCall, ToolSpec
from hermes_nb.protocol.metrics import (
    ENV_FAILED_EPISODES,
    ENV_TURN_LIMIT_EPISODES,
    ENV_TURNS_MEAN,
    EVAL_FAILED_EPISODES,
    EVAL_PERCENT_CORRECT,
    EVAL_POLICY_STEP,
)
from hermes_nb.protocol.trajectory import ScoredDataGroup

logger = logging.getLogger(__name__)

# A group compares its members' scores: with fewer than two there is no group-relative advantage to learn from.
MIN_GROUP_EPISODES = 2


class AgentEnvConfig(BaseEnvConfig):
    """``BaseEnvConfig`` plus the limits of one episode. ``max_token_length`` bounds a whole episode (prompt,
    every turn and tool result); no request asks past it."""

    max_turns: int = Field(default=4, ge=1, le=64, description="Assistant turns per episode (tool calls included).")
    max_turn_tokens: int = Field(
        default=64, ge=1, le=MAX_NEW_TOKENS, description="Tokens one assistant turn may sample."
    )


class AgentEnv(GeneratedItems, BaseEnv):
    """Subclass it: set ``name``, implement ``generate_problem``, ``tools`` and ``call_tool``."""

    env_config_cls: ClassVar[type[BaseEnvConfig]] = AgentEnvConfig
    # Episodes send their tools through the chat template: the shipped chat model's renders them.
    trainer_needs: ClassVar[EnvironmentNeeds] = EnvironmentNeeds(base_model=EMBEDDED_CHAT_MODEL, uses_tools=True)
    # The system message of every episode (before the tools block the template writes); None: no system turn.
    system_prompt: ClassVar[str | None] = None
    # Held-out items whose greedy episodes run at once per evaluation worker: each turn of each is its own request
    # (the server batches requests that arrive together), so a chunk bounds the requests in flight.
    eval_chunk_size: ClassVar[int] = 64

    config: AgentEnvConfig

    def __init__(
        self,
        config: BaseEnvConfig,
        server_configs: Sequence[APIServerConfig] | None = None,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        if not isinstance(config, AgentEnvConfig):
            raise ConfigError(
                f"{type(self).__name__}: its config must be an AgentEnvConfig (or a subclass), got "
                f"{type(config).__name__}; set env_config_cls to it"
            )
        super().__init__(config, server_configs, slurm, testing)
        self.failed_episodes = 0
        self.turn_limit_episodes = 0
        self.episode_turns: list[int] = []  # one entry per finished training episode since the last row

    # ---- what a subclass gives ---------------------------------------------------------------------------------
    @abstractmethod
    def tools(self) -> list[ToolSpec]:
        """The tools the policy may call, as the chat template shows them."""

    @abstractmethod
    async def call_tool(self, call: FunctionCall, item: QAItem) -> str:
        """The result of ``call`` (its ``arguments`` are a JSON object as a string) for the episode of ``item``.
        Return an error text for a bad call: the policy sees it. Raising fails the episode (counted)."""

    def initial_messages(self, item: QAItem) -> list[ChatMessage]:
        """The conversation an episode starts from: the system prompt (when set) and the question."""
        system = [ChatMessage(role="system", content=self.system_prompt)] if self.system_prompt else []
        return [*system, ChatMessage(role="user", content=item.prompt)]

    def score_episode(self, episode: Episode, item: QAItem) -> float:
        """1.0 when the final answer is exactly ``item.answer`` (surrounding whitespace ignored), else 0.0; an
        episode without a final answer (turn limit, cut by the token budget) scores 0.0."""
        answer = episode.final_answer
        return 1.0 if answer is not None and answer.strip() == item.answer else 0.0

    # ---- episodes ----------------------------------------------------------------------------------------------
    @functools.cached_property
    def renderer(self) -> ChatRenderer:
        """The run's chat template and tokenizer (``tokenizer_name``: the base model's folder)."""
        return load_chat_renderer(self.config.tokenizer_name)

    def new_episode(self, item: QAItem) -> Episode:
        return Episode(
            self.server,
            self.renderer,
            self.initial_messages(item),
            tools=self.tools(),
            max_token_length=self.config.max_token_length,
            max_turns=self.config.max_turns,
        )

    async def play(self, episodes: list[Episode], item: QAItem, temperature: float) -> list[Episode | Exception]:
        """Play ``episodes`` of ``item`` to their end: each finished episode, or the exception that ended it.
        The first turn is asked for all at once; its failure (the server's) fails them all and is raised."""
        await ask_all(episodes, max_tokens=self.config.max_turn_tokens, temperature=temperature)
        results = await asyncio.gather(
            *(self._play_on(episode, item, temperature) for episode in episodes), return_exceptions=True
        )
        outcomes: list[Episode | Exception] = []
        for episode, result in zip(episodes, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancelled: the group's worker is being stopped
            outcomes.append(result if isinstance(result, Exception) else episode)
        return outcomes

    async def _play_on(self, episode: Episode, item: QAItem, temperature: float) -> None:
        """After a turn: answer its tool calls and ask again, until an answer or a limit ends the episode."""
        while True:
            calls = episode.messages[-1].tool_calls
            if not calls or episode.truncated or episode.turn_limit_reached:
                return
            results = [await self.call_tool(call.function, item) for call in calls]
            episode.add(
                *(ChatMessage(role="tool", content=r, tool_call_id=c.id) for c, r in zip(calls, results, strict=True))
            )
            if not episode.can_ask:
                return  # the tool results leave no room for another turn
            await episode.ask(max_tokens=self.config.max_turn_tokens, temperature=temperature)

    # ---- training groups ---------------------------------------------------------------------------------------
    async def collect_trajectories(self, item: QAItem) -> tuple[ScoredDataGroup | None, list[QAItem]]:
        episodes = [self.new_episode(item) for _ in range(self.config.group_size)]
        try:
            outcomes = await self.play(episodes, item, self.config.temperature)
        except Exception:
            self.failed_episodes += len(episodes)
            raise
        finished = self._finished(outcomes, item)
        if len(finished) < MIN_GROUP_EPISODES:
            return None, []
        scores = [self.score_episode(episode, item) for episode in finished]
        group = self.scored_group([episode.trained_sequence() for episode in finished], scores)
        return with_episode_messages(group, [episode.messages for episode in finished]), []

    def _finished(self, outcomes: list[Episode | Exception], item: QAItem) -> list[Episode]:
        """The episodes that finished, counted; failures counted and logged. Raises the first failure when
        every episode failed (a group that never forms is the environment's fault, not a skip), and an
        ``EnvironmentGone`` whenever one came."""
        finished = [o for o in outcomes if isinstance(o, Episode)]
        errors = [o for o in outcomes if isinstance(o, Exception)]
        self.failed_episodes += len(errors)
        self.turn_limit_episodes += sum(episode.turn_limit_reached for episode in finished)
        self.episode_turns.extend(episode.turns for episode in finished)
        for error in errors:
            logger.warning("an episode failed and is left out of its group: %s: %s (item %r)",
                           type(error).__name__, error, item.prompt[:200], exc_info=error)  # fmt: skip
        gone = [e for e in errors if isinstance(e, EnvironmentGone)]
        if gone:
            raise gone[0]  # no later group can form either: the host ends the run
        if errors and not finished:
            raise errors[0]
        return finished

    async def wandb_log(self, wandb_metrics: dict[str, float] | None = None) -> dict[str, float]:
        metrics = await super().wandb_log(wandb_metrics)
        if not (self.episode_turns or self.failed_episodes):
            return metrics
        metrics[ENV_FAILED_EPISODES] = float(self.failed_episodes)
        metrics[ENV_TURN_LIMIT_EPISODES] = float(self.turn_limit_episodes)
        if self.episode_turns:
            metrics[ENV_TURNS_MEAN] = sum(self.episode_turns) / len(self.episode_turns)
        self.failed_episodes = self.turn_limit_episodes = 0
        self.episode_turns = []
        return metrics

    # ---- evaluation --------------------------------------------------------------------------------------------
    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        items = self.eval_items()
        chunks = [items[i : i + self.eval_chunk_size] for i in range(0, len(items), self.eval_chunk_size)]
        limit = asyncio.Semaphore(self.config.max_eval_workers)

        async def greedy(chunk: list[QAItem]) -> list[Episode | BaseException]:
            async with limit:
                plays = (self._greedy_episode(item) for item in chunk)
                return list(await asyncio.gather(*plays, return_exceptions=True))

        outcomes = [o for chunk_outcomes in await asyncio.gather(*map(greedy, chunks)) for o in chunk_outcomes]
        return self._eval_results(outcomes, items)

    async def _greedy_episode(self, item: QAItem) -> Episode:
        [outcome] = await self.play([self.new_episode(item)], item, temperature=0.0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _eval_results(self, outcomes: list[Episode | BaseException], items: list[QAItem]) -> dict[str, float]:
        errors = [o for o in outcomes if not isinstance(o, Episode)]
        if errors and len(errors) == len(outcomes):
            raise errors[0]  # nothing was measured: the host logs the evaluation as failed
        for error in errors[:1]:
            logger.warning("%d of %d evaluation episodes failed (counted as wrong); the first: %s: %s",
                           len(errors), len(outcomes), type(error).__name__, error, exc_info=error)  # fmt: skip
        correct = [
            isinstance(o, Episode) and self.is_correct(self.score_episode(o, item))
            for o, item in zip(outcomes, items, strict=True)
        ]
        results = {EVAL_PERCENT_CORRECT: sum(correct) / len(correct), EVAL_FAILED_EPISODES: float(len(errors))}
        versions = [v for o in outcomes if isinstance(o, Episode) for v in o.policy_versions]
        if versions:
            # Episodes straddle weight updates: name the newest weights, so no result is credited early.
            results[EVAL_POLICY_STEP] = float(max(versions))
        return results
