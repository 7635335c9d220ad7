"""The trajectory API's cap on sequences held: a post that would exceed it is refused (503, retry later) and
changes nothing; what was accepted is kept until served; environments are told the room left and wait for it."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from hermes_nb.config import RunConfig
from hermes_nb.env_host.trajectory_link import TrajectoryLink
from hermes_nb.protocol.trajectory import MASK_IGNORE, RegisterEnv, Registration, ScoredDataGroup
from hermes_nb.trajectory_api.server import ApiSettings, create_app
from hermes_nb.trajectory_api.state import RETRY_AFTER_S, ApiLimits, RequestRejected, TrajectoryState

CAP = ApiLimits(max_queued_sequences=8)


def group(size: int, first_token: int = 1, env_id: int | None = None) -> ScoredDataGroup:
    tokens = [[first_token + i] * 3 for i in range(size)]
    masks = [[MASK_IGNORE, *seq[1:]] for seq in tokens]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=[float(i % 2) for i in range(size)], env_id=env_id)


def registered(limits: ApiLimits = CAP, batch_size: int = 4) -> TrajectoryState:
    state = TrajectoryState(limits)
    state.register(Registration(batch_size=batch_size, max_token_len=64, num_steps=10))
    return state


def held(state: TrajectoryState) -> tuple[object, ...]:
    return ([[g.tokens for g in u.groups] for u in state.queue], state.held_sequences, state.latest)


def test_a_post_over_the_cap_is_refused_with_503_and_changes_nothing() -> None:
    state = registered()
    state.add_group(group(4, first_token=10))
    state.add_group(group(4, first_token=20))
    before = held(state)

    with pytest.raises(RequestRejected) as refused:
        state.add_group(group(4, first_token=30))

    assert refused.value.status_code == 503 and refused.value.retry_after == RETRY_AFTER_S
    assert "queue is full (8 of 8 sequences held" in str(refused.value) and "retry later" in str(refused.value)
    assert held(state) == before


def test_every_accepted_group_is_served_and_room_comes_back_as_batches_are_pulled() -> None:
    state = registered()
    for first in (10, 20):
        state.add_group(group(4, first_token=first))

    batch = state.next_batch()
    state.add_group(group(4, first_token=30))  # fits again: the trainer pulled a batch

    assert batch is not None and batch[0].tokens[0][0] == 10
    served = [state.next_batch(), state.next_batch()]
    assert [b[0].tokens[0][0] for b in served if b] == [20, 30]
    assert state.held_sequences == 0 and state.queue_room() == 8


def test_a_list_is_refused_whole_when_it_does_not_fit_and_with_413_when_it_never_could() -> None:
    state = registered()
    state.add_group(group(4, first_token=10))

    with pytest.raises(RequestRejected) as full:
        state.add_groups([group(2, first_token=20), group(4, first_token=30)])
    with pytest.raises(RequestRejected) as too_big:
        state.add_groups([group(4), group(4), group(2)])

    assert full.value.status_code == 503 and "scored_data_list: the queue is full" in str(full.value)
    assert too_big.value.status_code == 413 and "10 sequences in one request" in str(too_big.value)
    assert state.held_sequences == 4 and len(state.queue) == 1


def test_groups_buffered_to_combine_count_against_the_cap() -> None:
    state = registered(batch_size=8)
    answer = state.register_env(RegisterEnv(max_token_length=64, desired_name="e", group_size=4))
    assert answer.env_id is not None
    for first in (10, 20, 30):
        state.add_group(group(2, first_token=first, env_id=answer.env_id))  # one unit of 4 + one buffered 2
    state.add_group(group(2, first_token=40, env_id=answer.env_id))

    with pytest.raises(RequestRejected):
        state.add_group(group(2, first_token=50, env_id=answer.env_id))
    assert state.held_sequences == 8


def test_status_env_tells_the_room_left_and_health_the_sequences_held_and_the_cap() -> None:
    state = registered()
    env_id = state.register_env(RegisterEnv(max_token_length=64, desired_name="e", group_size=2)).env_id
    assert env_id is not None
    state.add_group(group(2, env_id=env_id))
    state.add_group(group(4))

    assert state.status_env(env_id).queue_room == 2
    health = state.health()
    assert (health.held_sequences, health.max_queued_sequences) == (6, 8)
    uncapped = registered(ApiLimits())
    uncapped_env = uncapped.register_env(RegisterEnv(max_token_length=64, desired_name="e", group_size=2)).env_id
    assert uncapped_env is not None and uncapped.status_env(uncapped_env).queue_room is None


def test_the_http_refusal_carries_retry_after_and_the_reason() -> None:
    async def scenario() -> httpx.Response:
        app = create_app(ApiSettings(limits=ApiLimits(max_queued_sequences=4)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            await client.post("/register", json={"batch_size": 4, "max_token_len": 8, "num_steps": 3})
            body = group(4).model_dump(mode="json")
            assert (await client.post("/scored_data", json=body)).status_code == 200
            return await client.post("/scored_data", json=body)

    refused = asyncio.run(scenario())

    assert refused.status_code == 503
    assert refused.headers["retry-after"] == str(RETRY_AFTER_S)
    assert "the queue is full (4 of 4 sequences held" in refused.json()["detail"]


def test_an_environment_waits_out_a_full_queue_past_its_retry_window_and_its_group_arrives() -> None:
    """The link retries other 5xx for ``retry_seconds``; a full queue it waits out for as long as it lasts."""
    app = create_app(ApiSettings(limits=ApiLimits(max_queued_sequences=4)))
    state: TrajectoryState = app.state.trajectory
    state.register(Registration(batch_size=4, max_token_len=8, num_steps=3))

    async def scenario() -> float:
        link = TrajectoryLink("http://api", transport=httpx.ASGITransport(app=app), retry_seconds=0.3)
        registration = await link.register(RegisterEnv(max_token_length=8, desired_name="e", group_size=4))
        assert registration is not None
        await link.post_group(group(4, first_token=10))
        started = time.monotonic()
        waiting = asyncio.create_task(link.post_group(group(4, first_token=20)))
        await asyncio.sleep(1.0)  # over three times the retry window, the post still waits
        assert not waiting.done()
        assert state.next_batch() is not None  # the trainer pulls: room for the waiting group
        await asyncio.wait_for(waiting, 5.0)
        await link.aclose()
        return time.monotonic() - started

    waited = asyncio.run(scenario())

    assert waited >= 1.0
    assert [u.groups[0].tokens[0][0] for u in state.queue] == [20]


def test_a_runs_cap_is_max_queued_batches_batches_of_its_batch_size() -> None:
    config = RunConfig.model_validate({"env": {"batch_size": 16}, "trainer": {"max_queued_batches": 3}})

    assert config.max_queued_sequences() == 48
    assert RunConfig().max_queued_sequences() == 4 * 128  # the defaults: 4 batches of 128
