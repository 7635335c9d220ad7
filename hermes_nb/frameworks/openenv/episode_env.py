"""The environment process of an OpenEnv run: episodes over OpenEnv sessions, with ``AgentEnv``'s exact tokens.

``python -m hermes_nb.env_host serve <this file>:OpenEnvAgentEnv --config <run>/config.yaml`` in the OpenEnv
Python. ``setup`` starts the server of the file named by ``FILE_VAR`` (or uses ``server_url``), reads which Action
field a reply fills (``/schema``) and lists the MCP tools once. An item is a reset seed: every member of a group
resets its own session with the same seed, so the group shares its task. One episode: ``reset`` -> the observation
as the user message -> the policy's turn; a turn with tool calls is answered by ``tools/call`` in the session
(``tool`` messages), a turn without is the Action of a ``step``, whose observation is the next user message until
``done`` or ``max_turns``. The score aggregates the steps' rewards (``rewards``). Sessions open within the
server's ``max_concurrent_envs`` (``slots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import httpx

from hermes_nb.config import BaseEnvConfig
from hermes_nb.env.agent import AgentEnv
from hermes_nb.env.episodes import Episode, ask_all
from hermes_nb.env.types import QAItem
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.openenv.handoff import FILE_VAR, LOG_VAR
from hermes_nb.frameworks.openenv.rewards import episode_score
from hermes_nb.frameworks.openenv.server import ServerError, ServerProcess, start_server
from hermes_nb.frameworks.openenv.session import CapacityReached, ConnectionLost, OpenEnvSession, StepResult
from hermes_nb.frameworks.openenv.settings import OpenEnvSettings
from hermes_nb.frameworks.openenv.slots import SessionSlots
from hermes_nb.protocol.inference import ChatMessage, FunctionCall, ToolSpec

# Observation fields every OpenEnv observation has; never the text of a message.
BASE_OBSERVATION_FIELDS = ("metadata", "done", "reward")
# Reset seeds drawn for items: any int OpenEnv environments accept (numpy's seeds stop at 2**32).
SEED_RANGE = 2**31


class OpenEnvEpisode(Episode):
    """An episode with the rewards its steps sent (``None`` rewards left out) and whether the environment ended it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rewards: list[float] = []
        self.done = False


class OpenEnvAgentEnv(AgentEnv):
    name = "openenv"
    env_config_cls: ClassVar[type[BaseEnvConfig]] = OpenEnvSettings
    config: OpenEnvSettings

    server_process: ServerProcess | None = None
    url = ""
    action_field = ""
    tool_specs: list[ToolSpec]
    slots: SessionSlots
    idle: list[OpenEnvSession]

    async def setup(self) -> None:
        self.slots = SessionSlots()
        self.idle = []
        self.url = self.config.server_url or ""
        if not self.url:
            file = os.environ.get(FILE_VAR, "")
            if not file:
                raise ConfigError(f"env.server_url: none given, and {FILE_VAR} names no environment file to serve")
            log = Path(os.environ.get(LOG_VAR) or Path(file).with_suffix(".openenv.log"))
            self.server_process = await start_server(file, log)
            self.url = self.server_process.url
        self.action_field = self.config.action_field or await self._text_action_field()
        async with OpenEnvSession(self.url) as session:
            self.tool_specs = [tool.as_tool_spec() for tool in await session.list_tools_or_none()]

    async def _text_action_field(self) -> str:
        async with httpx.AsyncClient(timeout=30.0) as client:
            schema = (await client.get(self.url + "/schema")).json().get("action", {})
        texts = [name for name, prop in schema.get("properties", {}).items() if prop.get("type") == "string"]
        if len(texts) != 1:
            raise ConfigError(
                f"env.action_field: the Action of {self.url} has {len(texts)} text fields "
                f"({', '.join(texts) or 'none'}); "
                "name the one the model's reply fills"
            )
        return str(texts[0])

    def generate_problem(self, rng: random.Random) -> QAItem:
        seed = rng.randrange(SEED_RANGE)
        return QAItem(prompt=f"reset seed {seed}", answer="", metadata={"seed": seed})

    def tools(self) -> list[ToolSpec]:
        return list(self.tool_specs)

    async def call_tool(self, call: FunctionCall, item: QAItem) -> str:
        raise NotImplementedError("an OpenEnv episode's tools are called in its session (play_episode)")

    def score_episode(self, episode: Episode, item: QAItem) -> float:
        rewards = episode.rewards if isinstance(episode, OpenEnvEpisode) else []
        return episode_score(rewards, self.config.reward, self.config.discount)

    async def play(self, episodes: list[Episode], item: QAItem, temperature: float) -> list[Episode | Exception]:
        """Each of ``episodes`` stands for one session, played from its own reset (their messages are unused). A
        group the server can seat at once plays together (``_play_group``); a larger one, member by member."""
        if self.slots.fits(len(episodes)):
            try:
                return await self.slots.run(lambda: self._play_group(len(episodes), item, temperature), len(episodes))
            except CapacityReached:
                pass  # the server holds fewer sessions than a group: member by member below
        results = await asyncio.gather(
            *(self.play_episode(item, temperature) for _ in episodes), return_exceptions=True
        )
        return await self._outcomes(results)

    async def _play_group(self, size: int, item: QAItem, temperature: float) -> list[Episode | Exception]:
        """``size`` sessions reset with the group's seed; members with the same first observation (a deterministic
        environment's, for one seed) ask their first turn as one request with ``n`` samples, as ``AgentEnv``'s
        groups do, instead of one request each; then each plays on in its own session. A refused session
        (``CapacityReached``) is raised, every session closed, for ``slots`` to retry."""
        async with contextlib.AsyncExitStack() as stack:
            # return_exceptions: every open has finished (and is on the stack) before the stack can close.
            opened = await asyncio.gather(
                *(stack.enter_async_context(self._session()) for _ in range(size)), return_exceptions=True
            )
            sessions = [s for s in opened if isinstance(s, OpenEnvSession)]
            firsts = await asyncio.gather(
                *(s.reset(seed=item.metadata["seed"]) for s in sessions), return_exceptions=True
            )
            for first in firsts:
                if isinstance(first, CapacityReached):
                    raise first
            seated = [(s, self._episode([self.observation_message(f)])) for s, f in zip(sessions, firsts, strict=True)
                      if isinstance(f, StepResult)]  # fmt: skip
            # Its failure (the inference server's) fails the group, as AgentEnv's first turn does.
            await ask_all([e for _, e in seated], max_tokens=self.config.max_turn_tokens, temperature=temperature)
            played = await asyncio.gather(
                *(self._play_in_session(s, e, temperature) for s, e in seated), return_exceptions=True
            )
            # A session whose reset or episode failed may be broken: closed, never reused.
            pairs = [*zip(sessions, firsts, strict=True), *zip((s for s, _ in seated), played, strict=True)]
            for session, result in pairs:
                if isinstance(result, BaseException):
                    await session.close()
        failed = [r for r in (*opened, *firsts) if isinstance(r, BaseException)]
        return await self._outcomes([*played, *failed])

    async def _outcomes(self, results: list[Any]) -> list[Episode | Exception]:
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancelled: the group's worker is being stopped
        died = await self._server_death(results)
        return [died if died is not None and isinstance(r, ConnectionLost) else r for r in results]

    def new_episode(self, item: QAItem) -> Episode:
        return self._episode([])

    def _episode(self, messages: list[ChatMessage]) -> OpenEnvEpisode:
        system = [ChatMessage(role="system", content=self.config.system_prompt)] if self.config.system_prompt else []
        return OpenEnvEpisode(
            self.server, self.renderer, [*system, *messages], tools=self.tool_specs,
            max_token_length=self.config.max_token_length, max_turns=self.config.max_turns,
        )  # fmt: skip

    async def play_episode(self, item: QAItem, temperature: float) -> OpenEnvEpisode:
        """One episode in its own session, within the server's session capacity (``slots``)."""
        return await self.slots.run(lambda: self._play_session(item, temperature))

    async def _play_session(self, item: QAItem, temperature: float) -> OpenEnvEpisode:
        async with self._session() as session:
            first = await session.reset(seed=item.metadata["seed"])
            episode = self._episode([self.observation_message(first)])
            await episode.ask(max_tokens=self.config.max_turn_tokens, temperature=temperature)
            return await self._play_in_session(session, episode, temperature)

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[OpenEnvSession]:
        """An open session for one episode: an idle one an earlier episode ended cleanly in (its ``reset`` starts
        the new episode, as OpenEnv's own clients reuse theirs), else a new one; idle again after the episode,
        closed when it failed. Connecting, the server's new environment and closing cost about as much CPU as
        an episode of a one-step task. Open sessions never outnumber the most episodes played at once, so the
        server's limit holds as before."""
        session = self.idle.pop() if self.idle else await OpenEnvSession(self.url).__aenter__()
        try:
            yield session
        except BaseException:
            await session.close()
            raise
        if session.is_open:  # not closed after its episode failed (``_play_group``)
            self.idle.append(session)

    async def _play_in_session(
        self, session: OpenEnvSession, episode: OpenEnvEpisode, temperature: float
    ) -> OpenEnvEpisode:
        """From a turn just sampled to the episode's end: tool calls answered in the session (``tool`` messages), a
        reply stepped as the Action, whose observation is the next user message, until ``done``, ``max_turns``
        or a turn cut by its token budget."""
        while not episode.truncated:
            reply = episode.messages[-1]
            if reply.tool_calls:
                results = [
                    await session.call_tool(c.function.name, tool_arguments(c.function)) for c in reply.tool_calls
                ]
                episode.add(
                    *(ChatMessage(role="tool", content=r, tool_call_id=c.id)
                      for c, r in zip(reply.tool_calls, results, strict=True))
                )  # fmt: skip
            else:
                result = await session.step({self.action_field: reply.content or ""})
                if result.reward is not None:
                    episode.rewards.append(result.reward)
                episode.done = result.done
                if result.done:
                    break
                episode.add(self.observation_message(result))
            if not episode.can_ask:
                break
            await episode.ask(max_tokens=self.config.max_turn_tokens, temperature=temperature)
        return episode

    def observation_message(self, result: StepResult) -> ChatMessage:
        return ChatMessage(role="user", content=observation_text(result.observation, self.config.observation_field))

    async def _server_death(self, results: list[Any]) -> ServerError | None:
        """The ``ServerError`` of the run's own server's death (its log's tail), which ends the run at once, when a
        connection among ``results`` was lost and the server has exited; asked once for all of them. A server at
        ``server_url`` may come back: its errors count toward ``env.max_consecutive_failures`` like any."""
        if self.server_process is None or not any(isinstance(r, ConnectionLost) for r in results):
            return None
        try:
            await self.server_process.check_alive_after()
        except ServerError as died:
            return died
        return None


def observation_text(observation: dict[str, Any], field: str | None) -> str:
    """The user message of an observation: ``field``'s text; unnamed, its only text field, else its own fields
    (OpenEnv's base fields left out) as JSON."""
    own = {k: v for k, v in observation.items() if k not in BASE_OBSERVATION_FIELDS}
    if field is not None:
        if field not in observation:
            raise ConfigError(
                f"env.observation_field: the observation has no field {field!r} (it has: {', '.join(observation)})"
            )
        value = observation[field]
        return value if isinstance(value, str) else json.dumps(value)
    texts = [v for v in own.values() if isinstance(v, str)]
    return texts[0] if len(texts) == 1 and len(own) == 1 else json.dumps(own, default=str)


def tool_arguments(call: FunctionCall) -> dict[str, Any]:
    """A tool call's arguments as MCP takes them; not a JSON object: an empty one, so the tool's own error says
    what it needs (the policy reads it)."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}
