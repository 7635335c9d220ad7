"""``Episode`` against a real inference server: every prompt sent is the transcript so far, each turn is appended
exactly as sampled, the template's text between turns is appended and masked, and the token budget, cut turns,
malformed calls, non-prefix-stable templates and text-only endpoints are handled as documented."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from agent_episodes import (
    HELDOUT_QUESTION,
    MALFORMED_CALL,
    MALFORMED_QUESTION,
    TEMPERATURE,
    TOOLS,
    TRAIN_QUESTION,
    Served,
    agent_model,
    script,
    serve_model,
)

from hermes_nb.env import ChatRenderer, Episode
from hermes_nb.env.episodes import EpisodeError, TemplateNotPrefixStable, ask_all
from hermes_nb.env.inference_client import ServerManager
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.protocol.inference import ChatMessage
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB

torch.set_num_threads(1)

TURN_TOKENS = 48


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_model(agent_model(tmp_path_factory.getbasetemp())) as served:
        yield served


@pytest.fixture
def renderer(served: Served) -> ChatRenderer:
    served.log.clear()
    return ChatRenderer.from_model_dir(served.path)


class CountingTransport(httpx.AsyncBaseTransport):
    """The real transport, with every request body kept: how many requests went, and what they asked."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _episode(server: ServerManager, renderer: ChatRenderer, question: str, **limits: Any) -> Episode:
    limits = {"max_token_length": 512, "max_turns": 4, **limits}
    return Episode(server, renderer, script(question)[:2], tools=TOOLS, **limits)


def _calculate(message: ChatMessage) -> list[ChatMessage]:
    results = []
    for call in message.tool_calls or []:
        left, op, right = json.loads(call.function.arguments)["expression"].partition("*")
        if not op:
            left, op, right = json.loads(call.function.arguments)["expression"].partition("+")
        value = int(left) * int(right) if op == "*" else int(left) + int(right)
        results.append(ChatMessage(role="tool", content=str(value), tool_call_id=call.id))
    return results


async def _play(episode: Episode, temperature: float = TEMPERATURE) -> None:
    message = await episode.ask(max_tokens=TURN_TOKENS, temperature=temperature)
    while message.tool_calls and not (episode.truncated or episode.turn_limit_reached):
        episode.add(*_calculate(message))
        if not episode.can_ask:
            return
        message = await episode.ask(max_tokens=TURN_TOKENS, temperature=temperature)


def _spans(tokens: list[int], served: Served) -> list[tuple[int, int, list[float]]]:
    """(start, end, logprobs) of every row the engine sampled whose prompt and answer lie along ``tokens``."""
    spans = []
    for row, result in served.log.rows():
        start, end = len(row.prompt), len(row.prompt) + len(result.token_ids)
        if tokens[:start] == row.prompt and tokens[start:end] == result.token_ids:
            spans.append((start, end, result.logprobs))
    return spans


def test_each_prompt_is_the_transcript_so_far_and_each_turn_is_appended_as_sampled(
    served: Served, renderer: ChatRenderer
) -> None:
    async def run() -> Episode:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        episode = _episode(server, renderer, TRAIN_QUESTION)
        await _play(episode)
        await server.aclose()
        return episode

    episode = asyncio.run(run())
    rows = served.log.rows()
    assert episode.turns == len(rows) == 3 and episode.final_answer == "33"  # two tool calls, then the answer
    first_prompt = renderer.encode(renderer.render(script(TRAIN_QUESTION)[:2], TOOLS, add_generation_prompt=True))
    assert rows[0][0].prompt == first_prompt  # the initial messages, rendered and encoded once
    tokens, masks, logprobs = episode.tokens, episode.masks, episode.logprobs
    assert logprobs is not None
    for row, _ in rows:
        assert tokens[: len(row.prompt)] == row.prompt  # every prompt sent is a prefix of the final sequence
    spans = _spans(tokens, served)
    assert len(spans) == len(rows)
    sampled = {position for start, end, _ in spans for position in range(start, end)}
    for start, end, sampled_logprobs in spans:
        assert masks[start:end] == tokens[start:end]
        assert logprobs[start:end] == sampled_logprobs
    assert all(
        masks[p] == MASK_IGNORE and logprobs[p] == PROMPT_LOGPROB for p in range(len(tokens)) if p not in sampled
    )
    assert tokens[-1] == renderer.eos_token_id  # the trained sequence ends with the last turn's eos
    # The model writes what the template writes, so the whole transcript reads as the template's conversation, but
    # for the "\n" the template writes after the last eos: nothing follows it, so it is not part of the sequence.
    assert renderer.decode(tokens) + "\n" == renderer.render(episode.messages, TOOLS)
    assert [m.role for m in episode.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert episode.messages[2].tool_calls and episode.messages[3].tool_call_id == episode.messages[2].tool_calls[0].id


def test_a_groups_first_turn_is_one_request_with_n(served: Served, renderer: ChatRenderer) -> None:
    transport = CountingTransport()

    async def run() -> list[Episode]:
        server = ServerManager([APIServerConfig(base_url=served.url)], transport=transport)
        episodes = [_episode(server, renderer, TRAIN_QUESTION) for _ in range(3)]
        await ask_all(episodes, max_tokens=TURN_TOKENS, temperature=1.0)
        await server.aclose()
        return episodes

    episodes = asyncio.run(run())
    [body] = transport.bodies
    assert body["n"] == 3 and body["prompt"] == episodes[0].prompt_ids[: len(body["prompt"])]
    assert all(e.turns == 1 for e in episodes)
    assert [row.prompt for row, _ in served.log.rows()] == [body["prompt"]] * 3


def test_a_turn_cut_by_its_token_budget_ends_the_episode(served: Served, renderer: ChatRenderer) -> None:
    async def run() -> Episode:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        episode = _episode(server, renderer, TRAIN_QUESTION)
        await episode.ask(max_tokens=4, temperature=0.0)
        await server.aclose()
        return episode

    episode = asyncio.run(run())
    [(row, result)] = served.log.rows()
    assert result.finish_reason == "length" and len(result.token_ids) == 4
    assert episode.truncated and not episode.can_ask and episode.final_answer is None
    assert episode.tokens == row.prompt + result.token_ids
    with pytest.raises(EpisodeError, match="has ended"):
        episode.add(ChatMessage(role="user", content="go on"))


def test_no_request_asks_past_max_token_length(served: Served, renderer: ChatRenderer) -> None:
    first_prompt = len(renderer.encode(renderer.render(script(TRAIN_QUESTION)[:2], TOOLS, add_generation_prompt=True)))

    async def run(max_token_length: int) -> Episode:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        episode = _episode(server, renderer, TRAIN_QUESTION, max_token_length=max_token_length)
        await _play(episode, temperature=0.0)
        await server.aclose()
        return episode

    cut = asyncio.run(run(first_prompt + 6))
    [(row, _)] = served.log.rows()
    assert row.max_tokens == 6 and len(cut.tokens) == first_prompt + 6 and cut.truncated
    served.log.clear()
    # Room for the first turn, not for the tool result that follows it: no second request is made.
    full = asyncio.run(run(first_prompt + 30))
    assert len(served.log.rows()) == 1 and full.turns == 1 and full.truncated and not full.can_ask
    assert len(full.prompt_ids) >= first_prompt + 30 > len(full.tokens)


def test_a_first_prompt_that_leaves_no_room_is_refused_naming_max_token_length(
    served: Served, renderer: ChatRenderer
) -> None:
    async def run() -> None:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        try:
            await _episode(server, renderer, TRAIN_QUESTION, max_token_length=50).ask(max_tokens=8, temperature=0.0)
        finally:
            await server.aclose()

    with pytest.raises(EpisodeError, match=r"max_token_length: the first prompt has \d+ tokens"):
        asyncio.run(run())
    assert served.log.rows() == []


def test_a_malformed_tool_call_comes_back_as_text_and_ends_the_episode(served: Served, renderer: ChatRenderer) -> None:
    async def run() -> Episode:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        episode = _episode(server, renderer, MALFORMED_QUESTION)
        await _play(episode, temperature=0.0)
        await server.aclose()
        return episode

    episode = asyncio.run(run())
    message = episode.messages[-1]
    assert message.tool_calls is None and message.content == MALFORMED_CALL
    assert episode.final_answer == MALFORMED_CALL and episode.turns == 1 and not episode.can_ask


def test_a_template_that_rewrites_earlier_turns_is_refused_naming_it(
    served: Served, renderer: ChatRenderer, tmp_path: Path
) -> None:
    folder = shutil.copytree(served.path, tmp_path / "rewriting_model")
    template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    # The same text while the conversation ends with a question; once an answer follows, a mark goes in front.
    (folder / "chat_template.jinja").write_text(
        "{% if messages[-1].role == 'assistant' %}(answered){% endif %}" + template, encoding="utf-8"
    )

    async def run() -> None:
        server = ServerManager([APIServerConfig(base_url=served.url)])
        try:
            await _episode(server, ChatRenderer.from_model_dir(folder), TRAIN_QUESTION).ask(
                max_tokens=48, temperature=0
            )
        finally:
            await server.aclose()

    with pytest.raises(TemplateNotPrefixStable, match=r"rewriting_model: the chat template is not prefix-stable"):
        asyncio.run(run())


def test_a_text_only_endpoint_is_asked_through_chat_and_the_episode_is_test_only(
    renderer: ChatRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fake_provider import KEY_VAR, SOLVER, ProviderState, fake_provider, use_key

    from hermes_nb.model_test.gateway import Gateway
    from hermes_nb.model_test.settings import EndpointSettings, EndpointStats

    use_key(monkeypatch)

    async def run(provider_url: str) -> tuple[Episode, ServerManager]:
        async with Gateway() as gateway:
            settings = EndpointSettings(base_url=provider_url, model=SOLVER, api_key_env=KEY_VAR)
            url = gateway.add_endpoint("hosted", settings, EndpointStats())
            server = ServerManager([APIServerConfig(base_url=url + "/v1")])
            episodes = [_episode(server, renderer, HELDOUT_QUESTION) for _ in range(2)]
            await ask_all(episodes, max_tokens=TURN_TOKENS, temperature=1.0)
            await server.aclose()
        return episodes[0], server

    with fake_provider(ProviderState(rate_limit_first=False)) as (provider_url, state):
        episode, server = asyncio.run(run(provider_url))
    assert [call.path for call in state.calls] == ["chat", "chat"]  # asked once per completion: n is ignored
    assert episode.test_only and episode.logprobs is None and server.text_only_answers == 1
    assert episode.final_answer == "?"  # the fake provider's answer to a question it cannot solve
    assert renderer.decode(episode.tokens) + "\n" == renderer.render(episode.messages, TOOLS)
    assert episode.trained_sequence().test_only
