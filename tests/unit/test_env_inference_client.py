"""ServerManager against a fake OpenAI-compatible inference server on loopback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from env_host_fakes import (
    EOS,
    REJECTED_PROMPT,
    FakeInferenceState,
    completion_ids,
    fake_inference_server,
    prompt_ids,
)

from hermes_nb.env.inference_client import InferenceError, ServerManager
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.types import SampledCompletion
from hermes_nb.protocol.inference import GenerateRequest
from hermes_nb.system.net import LOOPBACK, free_port


def manager(url: str, **config: object) -> ServerManager:
    return ServerManager([APIServerConfig(base_url=url + "/v1", **config)], retry_seconds=5)  # type: ignore[arg-type]


def test_sample_returns_exact_token_ids_and_aligned_logprobs() -> None:
    with fake_inference_server() as (url, _):
        server = manager(url)
        completions = asyncio.run(_sample_and_close(server, "12+3=", n=3))
    assert [c.text for c in completions] == ["0", "1", "0"]
    for c in completions:
        assert c.prompt_token_ids == prompt_ids("12+3=")
        assert c.token_ids == completion_ids(c.text) and c.token_ids[-1] == EOS
        assert len(c.logprobs) == len(c.token_ids) and all(lp < 0 for lp in c.logprobs)
        assert c.finish_reason == "stop"


async def _sample_and_close(server: ServerManager, prompt: str, **kwargs: int) -> list:  # type: ignore[type-arg]
    try:
        return await server.sample(prompt, **kwargs)
    finally:
        await server.aclose()


def test_base_url_without_v1_suffix_is_accepted() -> None:
    with fake_inference_server() as (url, _):
        server = ServerManager([APIServerConfig(base_url=url)])
        assert len(asyncio.run(_sample_and_close(server, "x", n=2))) == 2


def test_5xx_is_retried_until_the_server_recovers() -> None:
    with fake_inference_server(FakeInferenceState(fail_next=2)) as (url, state):
        completions = asyncio.run(_sample_and_close(manager(url), "a", n=1))
    assert len(completions) == 1 and state.completion_requests == 3


def test_unreachable_server_gives_up_after_the_retry_window() -> None:
    server = ServerManager([APIServerConfig(base_url=f"http://{LOOPBACK}:{free_port()}/v1")], retry_seconds=0.5)
    with pytest.raises(InferenceError, match="still failing after"):
        asyncio.run(_sample_and_close(server, "a"))


def test_invalid_request_fails_at_once_with_the_field_named() -> None:
    with fake_inference_server() as (url, state), pytest.raises(InferenceError, match="max_tokens"):
        asyncio.run(_sample_and_close(manager(url), "a", max_tokens=0))
    assert state.completion_requests == 0


def test_4xx_from_the_server_is_not_retried() -> None:
    refused = pytest.raises(InferenceError, match=r"HTTP 400: prompt\[0\]: refused")
    with fake_inference_server() as (url, state), refused:
        asyncio.run(_sample_and_close(manager(url), REJECTED_PROMPT))
    assert state.completion_requests == 1


def test_misaligned_logprobs_are_refused() -> None:
    refused = pytest.raises(InferenceError, match="logprobs for")
    with fake_inference_server(FakeInferenceState(bad_logprobs=True)) as (url, _), refused:
        asyncio.run(_sample_and_close(manager(url), "a", n=2))


def test_concurrency_is_capped_per_server() -> None:
    async def many(server: ServerManager) -> None:
        try:
            # Different settings never share a request, so these are eight requests.
            await asyncio.gather(*(server.sample(f"p{i}", max_tokens=i + 1) for i in range(8)))
        finally:
            await server.aclose()

    with fake_inference_server(FakeInferenceState(delay_s=0.05)) as (url, state):
        asyncio.run(many(manager(url, num_max_requests_at_once=2)))
    assert state.completion_requests == 8
    assert state.max_in_flight == 2


def test_concurrent_samples_with_the_same_settings_share_one_request() -> None:
    async def many(server: ServerManager) -> list[list[SampledCompletion]]:
        try:
            return await asyncio.gather(*(server.sample(f"p{i}", n=3) for i in range(8)))
        finally:
            await server.aclose()

    with fake_inference_server() as (url, state):
        groups = asyncio.run(many(manager(url)))
    assert state.prompts_per_request == [8]
    for i, group in enumerate(groups):
        assert len(group) == 3
        assert {tuple(c.prompt_token_ids) for c in group} == {tuple(prompt_ids(f"p{i}"))}


def test_a_refused_prompt_fails_only_its_own_caller() -> None:
    async def mixed(server: ServerManager) -> list[object]:
        try:
            prompts = ["a", REJECTED_PROMPT, "b"]
            return await asyncio.gather(*(server.sample(p) for p in prompts), return_exceptions=True)
        finally:
            await server.aclose()

    with fake_inference_server() as (url, state):
        first, refused, last = asyncio.run(mixed(manager(url)))
    assert isinstance(refused, InferenceError)
    assert [c.prompt_token_ids for c in first] == [prompt_ids("a")]  # type: ignore[attr-defined]
    assert [c.prompt_token_ids for c in last] == [prompt_ids("b")]  # type: ignore[attr-defined]
    # The shared request was refused, then each prompt was asked alone.
    assert state.prompts_per_request == [3, 1, 1, 1]


def test_api_key_comes_from_the_named_variable_and_is_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_INFERENCE_KEY", "sekret-123")
    with caplog.at_level(logging.DEBUG), fake_inference_server(FakeInferenceState(fail_next=1)) as (url, state):
        asyncio.run(_sample_and_close(manager(url, api_key_env="FAKE_INFERENCE_KEY"), "a"))
    assert state.authorization == ["Bearer sekret-123", "Bearer sekret-123"]
    assert "sekret-123" not in caplog.text


def test_generate_and_health_use_the_server_root() -> None:
    async def calls(server: ServerManager) -> tuple[object, object]:
        try:
            generated = await server.generate(GenerateRequest(prompt_token_ids=[[1, 2], [3]], n=2))
            return generated, await server.health()
        finally:
            await server.aclose()

    with fake_inference_server() as (url, _):
        generated, health = asyncio.run(calls(manager(url)))
    assert [s.prompt_index for s in generated.sequences] == [0, 0, 1, 1]  # type: ignore[attr-defined]
    assert health.policy_version == 3  # type: ignore[attr-defined]


def test_one_manager_serves_successive_event_loops() -> None:
    with fake_inference_server() as (url, _):
        server = manager(url)
        first = asyncio.run(_sample_and_close(server, "a"))
        second = asyncio.run(_sample_and_close(server, "b"))
    assert len(first) == len(second) == 1
