"""``TrajectoryClient`` against the real app (in-process ASGI transport) and against nothing at all."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from hermes_nb.net import LOOPBACK, free_port
from hermes_nb.protocol.trajectory import MASK_IGNORE, RegisterEnv, Registration, ScoredDataGroup
from hermes_nb.trajectory_api import TrajectoryAPIError, TrajectoryAPIUnavailable, TrajectoryClient
from hermes_nb.trajectory_api.server import create_app

T = TypeVar("T")
REGISTRATION = Registration(batch_size=4, max_token_len=16, num_steps=3, wandb_group="grp", wandb_project="proj")
ENV = RegisterEnv(max_token_length=16, desired_name="count", group_size=2)


def group(first: int, env_id: int | None = 0, length: int = 3) -> ScoredDataGroup:
    tokens = [[first + i] * length for i in range(2)]
    return ScoredDataGroup(
        tokens=tokens,
        masks=[[MASK_IGNORE, *seq[1:]] for seq in tokens],
        scores=[1.0, 0.0],
        inference_logprobs=[[1.0] + [-0.5] * (length - 1) for _ in tokens],
        env_id=env_id,
    )


def with_client(app: FastAPI, use: Callable[[TrajectoryClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with TrajectoryClient("http://api", transport=httpx.ASGITransport(app=app)) as api:
            return await use(api)

    return asyncio.run(go())


def test_a_trainer_and_an_environment_session_returns_typed_answers() -> None:
    async def session(api: TrajectoryClient) -> None:
        waited = await api.register_env(ENV)
        assert waited.status == "wait for trainer to start"
        assert isinstance(await api.register(REGISTRATION), int)
        env = await api.register_env(ENV)
        assert (env.status, env.env_id, env.num_steps) == ("success", 0, 3)
        assert await api.latest_example() is None

        assert (await api.post_scored_data(group(10))).status == "received"
        listed = await api.post_scored_data_list([group(20), group(30)])
        assert listed.groups_processed == 2
        assert (await api.status_env(0)).self_queue_size == 3
        assert (await api.status()).queue_size == 3

        assert await api.batch() == [group(10), group(20)]
        assert await api.latest_example() == group(30)
        assert (await api.info()).batch_size == 4
        assert (await api.wandb_info()).project == "proj"
        assert (await api.disconnect_env(0)).status == "success"
        health = await api.health()
        assert (health.trainer_registered, health.num_envs, health.current_step) == (True, 0, 1)

    with_client(create_app(), session)


def test_batch_is_none_while_too_little_data_is_queued() -> None:
    async def session(api: TrajectoryClient) -> list[ScoredDataGroup] | None:
        await api.register(REGISTRATION)
        await api.post_scored_data(group(10, env_id=None))
        return await api.batch()

    assert with_client(create_app(), session) is None


def test_reset_data_empties_the_api() -> None:
    async def session(api: TrajectoryClient) -> int:
        await api.register(REGISTRATION)
        await api.post_scored_data(group(10, env_id=None))
        await api.reset_data()
        return (await api.health()).queue_size

    assert with_client(create_app(), session) == 0


def test_a_refused_request_raises_with_the_status_and_the_servers_reason() -> None:
    async def session(api: TrajectoryClient) -> None:
        await api.register(REGISTRATION)
        await api.post_scored_data(group(10, length=17))

    with pytest.raises(TrajectoryAPIError, match=r"/scored_data: HTTP 422: tokens\[0\]: 17 tokens") as caught:
        with_client(create_app(), session)
    assert caught.value.status_code == 422


def test_batch_before_the_trainer_registered_raises_the_apis_message() -> None:
    async def session(api: TrajectoryClient) -> object:
        return await api.batch()

    with pytest.raises(TrajectoryAPIError, match="Trainer not registered"):
        with_client(create_app(), session)


def test_an_unreachable_api_raises_unavailable_naming_the_url() -> None:
    url = f"http://{LOOPBACK}:{free_port()}"

    async def session() -> None:
        async with TrajectoryClient(url, timeout=5.0) as api:
            await api.health()

    with pytest.raises(TrajectoryAPIUnavailable, match=f"trajectory API at {url} unreachable on /health"):
        asyncio.run(session())


def test_an_answer_that_is_not_the_protocol_raises_an_api_error() -> None:
    other = FastAPI()

    @other.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("hello")

    @other.get("/status")
    async def status() -> dict[str, str]:
        return {"step": "one"}

    async def health_session(api: TrajectoryClient) -> object:
        return await api.health()

    async def status_session(api: TrajectoryClient) -> object:
        return await api.status()

    with pytest.raises(TrajectoryAPIError, match="/health: the answer is not JSON"):
        with_client(other, health_session)
    with pytest.raises(TrajectoryAPIError, match="/status: unexpected answer"):
        with_client(other, status_session)
