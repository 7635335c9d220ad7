"""The trajectory API over HTTP: the app in-process through httpx's ASGI transport, and the real
``python -m hermes_nb.trajectory_api`` process on loopback."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest
from fastapi import FastAPI

from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.trajectory_api.server import ApiSettings, create_app
from hermes_nb.trajectory_api.state import ApiLimits

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 30.0  # two shared cores: a cold start can take several seconds
REGISTRATION = {"batch_size": 4, "max_token_len": 32, "num_steps": 10, "wandb_group": "g", "wandb_project": "p"}
ENV = {"max_token_length": 32, "desired_name": "arith", "weight": 1.0, "group_size": 2}


def scored(size: int = 2, env_id: int | None = None, first: int = 5) -> dict[str, Any]:
    tokens = [[1, first + i, first + i + 1] for i in range(size)]
    return {
        "tokens": tokens,
        "masks": [[-100, *seq[1:]] for seq in tokens],
        "scores": [float(i % 2) for i in range(size)],
        "inference_logprobs": [[1.0, -0.5, -0.25] for _ in range(size)],
        "env_id": env_id,
    }


def call(app: FastAPI, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


@pytest.fixture
def app() -> FastAPI:
    return create_app(ApiSettings(limits=ApiLimits(max_body_bytes=4096)))


def queue_is_empty(app: FastAPI) -> bool:
    status = call(app, "GET", "/status").json()
    latest = call(app, "GET", "/latest_example").json()
    return status["queue_size"] == 0 and latest["tokens"] == []


# ---- malformed payloads ----------------------------------------------------------------------------------------
def _without(field: str) -> dict[str, Any]:
    body = scored()
    del body[field]
    return body


def _with(**changes: Any) -> dict[str, Any]:
    return {**scored(), **changes}


MALFORMED_JSON = [
    ("missing-field", _without("masks"), 422, "masks: Field required"),
    ("token-not-int", _with(tokens=[[1, "a", 3], [1, 2, 3]]), 422, "tokens[0][1]"),
    ("scores-not-list", _with(scores="high"), 422, "scores: Input should be a valid list"),
    ("mask-row-short", _with(masks=[[-100, 6], [-100, 6, 7]]), 422, "masks[0]: has 2 values, tokens[0] has 3"),
    ("masks-count", _with(masks=[[-100, 6, 7]]), 422, "masks: has 1 entries, tokens has 2"),
    ("scores-count", _with(scores=[1.0]), 422, "scores: has 1 entries, tokens has 2"),
    ("logprobs-row", _with(inference_logprobs=[[1.0], [1.0, -1.0, -1.0]]), 422, "inference_logprobs[0]: has 1"),
    ("empty-group", _with(tokens=[], masks=[], scores=[], inference_logprobs=None), 422, "tokens: a scored group"),
    ("message-no-content", _with(messages=[[{"role": "user"}], [{"role": "user"}]]), 422, "messages[0][0].content"),
    ("array-not-object", [scored()], 422, "body: Input should be a valid dictionary"),
]


@pytest.mark.parametrize(
    ("payload", "code", "names"), [c[1:] for c in MALFORMED_JSON], ids=[c[0] for c in MALFORMED_JSON]
)
def test_a_malformed_group_is_refused_naming_the_field_and_nothing_is_queued(
    app: FastAPI, payload: Any, code: int, names: str
) -> None:
    response = call(app, "POST", "/scored_data", json=payload)

    assert response.status_code == code
    assert names in response.json()["detail"]
    assert queue_is_empty(app)


MALFORMED_BYTES = [
    ("not-json", b'{"tokens": [[1', {}, 400, "body: not valid JSON"),
    ("empty-body", b"", {}, 400, "body: empty"),
    ("nan-score", b'{"tokens": [[1]], "masks": [[1]], "scores": [NaN]}', {}, 400, "NaN is not a number JSON allows"),
    ("float-overflow", b'{"tokens": [[1]], "masks": [[1]], "scores": [1e999]}', {}, 400, "1e999 overflows"),
    ("bad-gzip", b"not gzip at all", {"Content-Encoding": "gzip"}, 400, "body: invalid gzip data"),
    ("unknown-encoding", b"{}", {"Content-Encoding": "br"}, 415, "Content-Encoding: 'br' is not supported"),
    ("oversized", b" " * 5000, {}, 413, "body: 5000 bytes, over this API's limit of 4096 bytes"),
    ("gzip-bomb", gzip.compress(b" " * 100_000), {"Content-Encoding": "gzip"}, 413, "decompresses to more than"),
]


@pytest.mark.parametrize(
    ("content", "headers", "code", "names"), [c[1:] for c in MALFORMED_BYTES], ids=[c[0] for c in MALFORMED_BYTES]
)
def test_a_body_that_is_not_acceptable_json_is_refused_and_nothing_is_queued(
    app: FastAPI, content: bytes, headers: dict[str, str], code: int, names: str
) -> None:
    response = call(app, "POST", "/scored_data", content=content, headers=headers)

    assert response.status_code == code
    assert names in response.json()["detail"]
    assert queue_is_empty(app)


def test_a_list_with_one_misaligned_group_queues_none_of_it(app: FastAPI) -> None:
    bad = _with(masks=[[-100, 6, 7]])

    response = call(app, "POST", "/scored_data_list", json=[scored(), bad, scored()])

    assert response.status_code == 422
    assert response.json()["detail"].startswith("scored_data_list[1]: masks: has 1 entries")
    assert queue_is_empty(app)


@pytest.mark.parametrize(
    ("path", "payload", "names"),
    [
        ("/register", {**REGISTRATION, "batch_size": "eight"}, "batch_size: Input should be a valid integer"),
        ("/register", {**REGISTRATION, "batch_size": 0}, "batch_size: Input should be greater than 0"),
        ("/register-env", {k: v for k, v in ENV.items() if k != "desired_name"}, "desired_name: Field required"),
        ("/register-env", {**ENV, "min_batch_allocation": 1.5}, "min_batch_allocation"),
        ("/disconnect-env", {"env": 0}, "env_id: Field required"),
    ],
    ids=["register-type", "register-zero-batch", "env-missing-name", "env-allocation-over-1", "disconnect-field"],
)
def test_malformed_registrations_are_refused_naming_the_field(
    app: FastAPI, path: str, payload: dict[str, Any], names: str
) -> None:
    response = call(app, "POST", path, json=payload)

    assert response.status_code == 422
    assert names in response.json()["detail"]
    assert call(app, "GET", "/health").json()["trainer_registered"] is False


# ---- the protocol --------------------------------------------------------------------------------------------
def test_before_any_registration_the_answers_match_atroposlib(app: FastAPI) -> None:
    assert call(app, "GET", "/batch").json() == {
        "batch": [],
        "status": "error",
        "message": "Trainer not registered. Call /register first.",
    }
    assert call(app, "GET", "/info").json() == {"batch_size": -1, "max_token_len": -1}
    assert call(app, "GET", "/wandb_info").json() == {"group": None, "project": None}
    assert call(app, "POST", "/register-env", json=ENV).json() == {"status": "wait for trainer to start"}
    assert call(app, "GET", "/status").json() == {"current_step": 0, "queue_size": 0}


def test_a_group_round_trips_from_scored_data_to_batch_with_every_atroposlib_key(app: FastAPI) -> None:
    assert isinstance(call(app, "POST", "/register", json=REGISTRATION).json()["uuid"], int)
    env = call(app, "POST", "/register-env", json=ENV).json()
    assert env == {
        "status": "success",
        "env_id": 0,
        "wandb_name": "arith_0",
        "checkpoint_dir": "",
        "starting_step": 0,
        "checkpoint_interval": 0,
        "num_steps": 10,
    }
    sent = [scored(env_id=0, first=10), scored(env_id=0, first=20)]
    for group in sent:
        assert call(app, "POST", "/scored_data", json=group).json() == {"status": "received"}

    batch = call(app, "GET", "/batch").json()["batch"]

    assert [{k: g[k] for k in sent[0]} for g in batch] == sent
    # atroposlib trainers index these keys directly, so they are present even when null.
    assert all(g["overrides"] is None and g["advantages"] is None for g in batch)
    assert call(app, "GET", "/status").json() == {"current_step": 1, "queue_size": 0}
    assert call(app, "GET", "/batch").json() == {"batch": None}


def test_a_gzipped_body_is_accepted_as_atroposlib_environments_send_it(app: FastAPI) -> None:
    body = gzip.compress(json.dumps(scored()).encode())

    response = call(
        app,
        "POST",
        "/scored_data",
        content=body,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )

    assert response.json() == {"status": "received"}
    assert call(app, "GET", "/latest_example").json()["tokens"] == scored()["tokens"]


def test_status_env_takes_env_id_as_a_get_body_or_a_query(app: FastAPI) -> None:
    call(app, "POST", "/register", json=REGISTRATION)
    call(app, "POST", "/register-env", json=ENV)
    call(app, "POST", "/scored_data", json=scored(env_id=0))

    by_body = call(app, "GET", "/status-env", json={"env_id": 0})
    by_query = call(app, "GET", "/status-env", params={"env_id": 0})

    assert by_body.json() == by_query.json()
    assert by_body.json() == {
        "current_step": 0,
        "queue_size": 1,
        "unallocated_fraction": 1.0,
        "self_queue_size": 1,
        "max_group_size": 2,
        "env_weight": 1.0,
    }


@pytest.mark.parametrize(
    ("kwargs", "code", "names"),
    [
        ({}, 422, "env_id: missing"),
        ({"json": {"env_id": 5}}, 404, "env_id: no environment 5"),
        ({"params": {"env_id": "x"}}, 422, "env_id"),
    ],
    ids=["missing", "unknown", "not-an-int"],
)
def test_status_env_without_a_known_env_id_is_refused(
    app: FastAPI, kwargs: dict[str, Any], code: int, names: str
) -> None:
    call(app, "POST", "/register", json=REGISTRATION)

    response = call(app, "GET", "/status-env", **kwargs)

    assert response.status_code == code
    assert names in response.json()["detail"]


def test_odd_size_groups_are_buffered_over_http_until_they_combine(app: FastAPI) -> None:
    call(app, "POST", "/register", json=REGISTRATION)
    call(app, "POST", "/register-env", json={**ENV, "group_size": 4})

    first = call(app, "POST", "/scored_data", json=scored(size=2, env_id=0))
    listed = call(app, "POST", "/scored_data_list", json=[scored(size=2, env_id=0), scored(size=4, env_id=0)])

    assert first.json() == {"status": "buffered", "buffer_size": 2}
    assert listed.json() == {"status": "received", "groups_processed": 2, "buffered": 1, "last_buffer_size": 0}
    batch = call(app, "GET", "/batch").json()["batch"]
    assert [len(g["tokens"]) for g in batch] == [2, 2]


def test_disconnect_env_answers_success_or_failure_like_atroposlib(app: FastAPI) -> None:
    call(app, "POST", "/register", json=REGISTRATION)
    call(app, "POST", "/register-env", json=ENV)

    assert call(app, "POST", "/disconnect-env", json={"env_id": 0}).json() == {"status": "success"}
    failed = call(app, "POST", "/disconnect-env", json={"env_id": 9}).json()
    assert failed["status"] == "failure"
    assert "env_id: no environment 9" in failed["error"]
    assert call(app, "GET", "/health").json()["num_envs"] == 0


def test_reset_data_answers_plain_text_and_forgets_everything(app: FastAPI) -> None:
    call(app, "POST", "/register", json=REGISTRATION)
    call(app, "POST", "/scored_data", json=scored())

    response = call(app, "GET", "/reset_data")

    assert (response.status_code, response.text) == (200, "Reset successful")
    assert call(app, "GET", "/health").json() == {
        "status": "ok",
        "trainer_registered": False,
        "num_envs": 0,
        "current_step": 0,
        "queue_size": 0,
        "held_sequences": 0,
        "max_queued_sequences": None,
    }


def test_concurrent_posts_are_each_queued_exactly_once(app: FastAPI) -> None:
    posts = 40

    async def go() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            answers = await asyncio.gather(*(client.post("/scored_data", json=scored(first=i)) for i in range(posts)))
            return [a.status_code for a in answers]

    assert asyncio.run(go()) == [200] * posts
    assert call(app, "GET", "/status").json()["queue_size"] == posts


# ---- the real process ------------------------------------------------------------------------------------------
def _start(port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hermes_nb.trajectory_api", "--host", LOOPBACK, "--port", str(port), *extra],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the API exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            httpx.get(f"{url}/health", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    pytest.fail(f"the API did not answer /health within {START_TIMEOUT_S} s")


@pytest.fixture
def served() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    proc = _start(port)
    try:
        _wait_healthy(f"http://{LOOPBACK}:{port}", proc)
        yield f"http://{LOOPBACK}:{port}", proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)  # reaps it and closes the stderr pipe


def test_the_process_serves_an_atroposlib_style_session_binds_loopback_only_and_exits_0_on_sigterm(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    url, proc = served
    with httpx.Client(base_url=url, timeout=10.0) as http:
        http.post("/register", json=REGISTRATION)
        env_id = http.post("/register-env", json=ENV).json()["env_id"]
        gz = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        for first in (10, 20):
            http.post(
                "/scored_data",
                content=gzip.compress(json.dumps(scored(env_id=env_id, first=first)).encode()),
                headers=gz,
            )
        status = http.request("GET", "/status-env", json={"env_id": env_id}).json()
        batch = http.get("/batch").json()["batch"]
        health = http.get("/health").json()
    listening = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections("inet") if c.status == psutil.CONN_LISTEN}

    proc.send_signal(signal.SIGTERM)
    _, log = proc.communicate(timeout=15)
    code = proc.returncode

    assert (status["queue_size"], status["self_queue_size"]) == (2, 2)
    assert [g["tokens"][0][1] for g in batch] == [10, 20]
    assert health == {
        "status": "ok",
        "trainer_registered": True,
        "num_envs": 1,
        "current_step": 1,
        "queue_size": 0,
        "held_sequences": 0,
        "max_queued_sequences": None,
    }
    assert listening == {LOOPBACK}
    assert code == 0
    assert f"listening on {url}" in log and "trajectory API stopped" in log
    assert "GET /health" not in log  # no access log unless asked


def test_the_process_names_the_port_when_it_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _start(port)
        try:
            _, log = proc.communicate(timeout=START_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 1
    assert f"cannot listen on {LOOPBACK}:{port}" in log


def test_the_listening_socket_declares_tcp_so_that_asyncio_turns_off_nagle() -> None:
    # With protocol 0, asyncio leaves Nagle on and every kept-alive answer waited ~40 ms for a delayed ACK.
    from hermes_nb.trajectory_api.__main__ import _bind

    with _bind(LOOPBACK, 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP


def test_the_payload_of_atroposlib_default_collect_trajectories_is_accepted(app: FastAPI) -> None:
    # What atroposlib's BaseEnv sends when no member had advantages, messages or overrides.
    payload = {
        **scored(),
        "advantages": [],
        "ref_logprobs": [],
        "messages": [],
        "group_overrides": {},
        "overrides": [],
        "images": [],
        "distill_token_ids": None,
        "distill_logprobs": None,
    }

    response = call(app, "POST", "/scored_data", json=payload)

    assert response.json() == {"status": "received"}
    latest = call(app, "GET", "/latest_example").json()
    assert (latest["advantages"], latest["overrides"], latest["images"]) == (None, None, [])
