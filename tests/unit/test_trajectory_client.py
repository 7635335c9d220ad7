"""The trajectory API client: the async face against the real app (in-process ASGI transport), both faces on
the wire (a recording transport), the sync face and the trainer's waits against the real API process, and
both faces against nothing at all."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from env_host_fakes import trajectory_api_process
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from hermes_nb.protocol.trajectory import MASK_IGNORE, RegisterEnv, Registration, ScoredDataGroup
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.trajectory_api import (
    SyncTrajectoryClient,
    TrajectoryAPIError,
    TrajectoryAPIUnavailable,
    TrajectoryClient,
)
from hermes_nb.trajectory_api.client import REGISTER_TIMEOUT_S
from hermes_nb.trajectory_api.server import create_app

T = TypeVar("T")
# How long a test waits for a blocking call to notice its stop event before failing with that wait's message.
STOP_NOTICED_WITHIN_S = 30.0
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


@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_unreachable_api_raises_unavailable_naming_the_url(face: str) -> None:
    url = f"http://{LOOPBACK}:{free_port()}"
    with pytest.raises(TrajectoryAPIUnavailable, match=f"trajectory API at {url} unreachable on /health"):
        call_on(face, url, None, "health")


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


# ---- both faces on the wire ----------------------------------------------------------------------------------
FACES = ["sync", "async"]
# Each endpoint's request, as the Atropos protocol has it: (method name, arguments, HTTP method, path, JSON body).
WIRE: list[tuple[str, tuple[object, ...], str, str, object]] = [
    ("health", (), "GET", "/health", None),
    ("info", (), "GET", "/info", None),
    ("status", (), "GET", "/status", None),
    ("wandb_info", (), "GET", "/wandb_info", None),
    ("latest_example", (), "GET", "/latest_example", None),
    ("reset_data", (), "GET", "/reset_data", None),
    ("register", (REGISTRATION,), "POST", "/register", REGISTRATION.model_dump(mode="json")),
    ("batch", (), "GET", "/batch", None),
    ("register_env", (ENV,), "POST", "/register-env", ENV.model_dump(mode="json")),
    ("disconnect_env", (3,), "POST", "/disconnect-env", {"env_id": 3}),
    # A JSON body on a GET: the only form an atroposlib run-api accepts.
    ("status_env", (3,), "GET", "/status-env", {"env_id": 3}),
    ("post_scored_data", (group(10),), "POST", "/scored_data", group(10).model_dump(mode="json")),
    (
        "post_scored_data_list",
        ([group(10), group(20)],),
        "POST",
        "/scored_data_list",
        [group(10).model_dump(mode="json"), group(20).model_dump(mode="json")],
    ),
]


def call_on(face: str, url: str, transport: httpx.MockTransport | None, name: str, *args: object) -> Any:
    """``name(*args)`` on a fresh client of ``face`` (a MockTransport serves both faces)."""
    if face == "sync":
        with SyncTrajectoryClient(url, timeout=5.0, transport=transport) as api:
            return getattr(api, name)(*args)

    async def go() -> Any:
        async with TrajectoryClient(url, timeout=5.0, transport=transport) as api:
            return await getattr(api, name)(*args)

    return asyncio.run(go())


def recording(answer: Callable[[httpx.Request], httpx.Response]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    return httpx.MockTransport(handle), seen


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("name", "args", "method", "path", "body"), WIRE, ids=[w[0] for w in WIRE])
def test_each_endpoint_sends_its_atropos_request_and_raises_the_servers_refusal(
    face: str, name: str, args: tuple[object, ...], method: str, path: str, body: object
) -> None:
    transport, seen = recording(lambda _: httpx.Response(503, json={"detail": "busy"}))
    with pytest.raises(TrajectoryAPIError, match=f"{path}: HTTP 503: busy") as caught:
        call_on(face, "http://api/", transport, name, *args)
    assert caught.value.status_code == 503
    [request] = seen
    assert (request.method, request.url.path) == (method, path)
    assert (json.loads(request.content) if request.content else None) == body
    assert request.headers.get("Content-Type") == ("application/json" if body is not None else None)


@pytest.mark.parametrize("face", FACES)
def test_both_faces_read_an_answer_into_its_protocol_model(face: str) -> None:
    transport, _ = recording(lambda _: httpx.Response(200, json={"batch": [group(10).model_dump(mode="json")]}))
    assert call_on(face, "http://api", transport, "batch") == [group(10)]


@pytest.mark.parametrize("face", FACES)
def test_both_faces_raise_the_refusal_of_a_batch_before_registration(face: str) -> None:
    refusal = {"status": "error", "message": "Trainer not registered", "batch": []}
    transport, _ = recording(lambda _: httpx.Response(200, json=refusal))
    with pytest.raises(TrajectoryAPIError, match="/batch: Trainer not registered"):
        call_on(face, "http://api", transport, "batch")


# ---- the sync face: health for pollers, the trainer's waits ---------------------------------------------------
@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with trajectory_api_process(tmp_path_factory.mktemp("api") / "api.log") as url:
        yield url


@pytest.fixture
def fresh_api(api_url: str) -> Iterator[SyncTrajectoryClient]:
    with SyncTrajectoryClient(api_url, timeout=10.0) as api:
        api.reset_data()
        yield api


def test_the_sync_face_runs_a_trainer_and_an_environment_session_against_the_real_api(
    fresh_api: SyncTrajectoryClient,
) -> None:
    api = fresh_api
    assert api.register_env(ENV).status == "wait for trainer to start"
    assert isinstance(api.register_when_up(REGISTRATION, threading.Event()), int)
    assert api.register_env(ENV).env_id == 0
    assert api.post_scored_data(group(10)).status == "received"
    assert api.post_scored_data_list([group(20)]).groups_processed == 1
    assert api.status_env(0).self_queue_size == 2
    assert api.next_batch(threading.Event()) == [group(10), group(20)]
    health = api.health_or_none()
    assert health is not None
    assert (health.trainer_registered, health.num_envs, health.current_step) == (True, 1, 1)


def test_next_batch_waits_for_enough_data_and_ends_on_stop(fresh_api: SyncTrajectoryClient) -> None:
    fresh_api.register(REGISTRATION)
    fresh_api.post_scored_data(group(10, env_id=None))
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Named wait: a next_batch that ignored the stop would block for good.
        assert pool.submit(fresh_api.next_batch, stop).result(timeout=STOP_NOTICED_WITHIN_S) is None
    assert time.monotonic() - started >= 0.3  # it waited for data until the stop (a lower bound: load only adds)
    fresh_api.post_scored_data(group(20, env_id=None))
    assert fresh_api.next_batch(threading.Event()) == [group(10, env_id=None), group(20, env_id=None)]


def test_register_when_up_retries_until_the_api_answers() -> None:
    attempts: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        if len(attempts) < 3:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"uuid": 7})

    with SyncTrajectoryClient("http://api", transport=httpx.MockTransport(answer)) as api:
        assert api.register_when_up(REGISTRATION, threading.Event()) == 7
    assert len(attempts) == 3


def test_register_when_up_gives_up_after_its_timeout_naming_the_url() -> None:
    url = f"http://{LOOPBACK}:{free_port()}"
    started = time.monotonic()
    with (
        SyncTrajectoryClient(url) as api,
        pytest.raises(TrajectoryAPIUnavailable, match=f"trajectory API at {url} unreachable on /register"),
    ):
        api.register_when_up(REGISTRATION, threading.Event(), timeout=0.3)
    assert time.monotonic() - started < REGISTER_TIMEOUT_S / 4  # its own 0.3 s, not the default's 120 s


def test_register_when_up_returns_none_once_stopped() -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with SyncTrajectoryClient(f"http://{LOOPBACK}:{free_port()}") as api:
        assert api.register_when_up(REGISTRATION, stop) is None


def test_a_refused_registration_is_raised_at_once_not_retried() -> None:
    transport, seen = recording(lambda _: httpx.Response(422, json={"detail": "batch_size: must be > 0"}))
    with SyncTrajectoryClient("http://api", transport=transport) as api, pytest.raises(TrajectoryAPIError) as caught:
        api.register_when_up(REGISTRATION, threading.Event())
    assert (caught.value.status_code, len(seen)) == (422, 1)


def test_health_or_none_is_none_without_an_api_or_without_a_health_endpoint(tmp_path: Path) -> None:
    # An atroposlib run-api has no /health: a 404.
    transport, _ = recording(lambda _: httpx.Response(404, json={"detail": "Not Found"}))
    with SyncTrajectoryClient("http://api", transport=transport) as api:
        assert api.health_or_none() is None
    with SyncTrajectoryClient(f"http://{LOOPBACK}:{free_port()}") as api:
        assert api.health_or_none() is None
