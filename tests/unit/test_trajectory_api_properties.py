"""Property: whatever a client sends to any trajectory API endpoint, the API answers below 500 (but for its 503
back-pressure when the queue is full), and its queue and step stay consistent.

A hypothesis state machine drives the real app in-process (httpx's ASGI transport: an exception in a route
fails the test with its traceback) with valid, near-valid (one field wrong) and garbage bodies, plain or gzipped.
After every request it checks, against its own count of what was accepted and served:

- sequences held (queued + buffered) = sequences accepted - sequences served by ``/batch``, never above the cap;
- ``/status``'s step = the first registration's ``starting_step`` + batches served (0 after ``/reset_data``),
  so it never goes back except on a reset;
- ``/status`` and ``/health`` agree on the queue, which is empty exactly when no sequence is queued.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hermes_nb.protocol.trajectory import Registration
from hermes_nb.trajectory_api.server import ApiSettings, create_app
from hermes_nb.trajectory_api.state import ApiLimits, TrajectoryState

# Small limits, so that bodies, groups and queues over them are generated too.
LIMITS = ApiLimits(max_body_bytes=16 * 1024, max_group_size=6, max_buffered_groups=4, max_queued_sequences=24)
# The one 5xx the API means to send: 503 + Retry-After to a post that would pass the queue's cap (back-pressure).
CAPPED_POSTS = ("/scored_data", "/scored_data_list")

JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
GARBAGE_JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
# Anything a float field could be sent, NaN included (json.dumps writes NaN, which strict JSON refuses).
ODD_NUMBER = st.sampled_from([float("nan"), float("inf"), -1e308, 1e308, 0, -1, 2**63, "1.5", "x", None, [], True])


@st.composite
def groups(draw: st.DrawFn) -> dict[str, Any]:
    """A valid scored group: masks -100 or the token, finite scores, optional logprobs and env_id."""
    size = draw(st.integers(1, 2) | st.integers(1, 5))
    # Ids mostly inside the registered vocabulary (>= 100), now and then beyond it.
    token_ids = st.integers(0, 99) | st.integers(0, 150)
    tokens = [draw(st.lists(token_ids, min_size=1, max_size=4)) for _ in range(size)]
    masks = [[t if draw(st.booleans()) else -100 for t in seq] for seq in tokens]
    masks[0][-1] = tokens[0][-1]  # at least one trained token
    group: dict[str, Any] = {
        "tokens": tokens,
        "masks": masks,
        "scores": draw(st.lists(st.floats(-10, 10, allow_nan=False), min_size=size, max_size=size)),
    }
    if draw(st.booleans()):
        group["inference_logprobs"] = [[-0.5] * len(seq) for seq in tokens]
    env_id = draw(st.sampled_from([None, None, 0, 1, 7, -1]))
    if env_id is not None:
        group["env_id"] = env_id
    return group


@st.composite
def near_valid(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> Any:
    """A valid body with one field removed, replaced by garbage or an odd number, or one row cut short (in one of
    the groups, for a list of them)."""
    drawn = draw(valid)
    if isinstance(drawn, list):
        index = draw(st.integers(0, len(drawn) - 1))
        return [*drawn[:index], draw(near_valid(st.just(drawn[index]))), *drawn[index + 1 :]]
    body = dict(drawn)
    key = draw(st.sampled_from([*sorted(body), "extra"]))
    change = draw(st.sampled_from(["drop", "garbage", "odd", "cut", "nest_odd"]))
    if change == "drop":
        body.pop(key, None)
    elif change == "garbage":
        body[key] = draw(GARBAGE_JSON)
    elif change == "odd":
        body[key] = draw(ODD_NUMBER)
    elif isinstance(body.get(key), list) and body[key]:
        rows = list(body[key])
        if change == "cut":
            rows = rows[:-1]
        elif isinstance(rows[0], list) and rows[0]:
            rows[0] = [draw(ODD_NUMBER), *rows[0][1:]]
        body[key] = rows
    return body


REGISTRATIONS = st.fixed_dictionaries(
    {
        "batch_size": st.integers(1, 4),
        "max_token_len": st.integers(3, 8),
        "num_steps": st.integers(1, 50),
        "starting_step": st.integers(0, 3),
    },
    optional={"vocab_size": st.integers(100, 200), "wandb_group": st.text(max_size=4)},
)
ENV_REGISTRATIONS = st.fixed_dictionaries(
    {"max_token_length": st.integers(1, 64), "desired_name": st.text(max_size=6), "group_size": st.integers(1, 4)},
    optional={"weight": st.floats(-2, 2), "min_batch_allocation": st.floats(0, 1)},
)
ENV_IDS = st.fixed_dictionaries({"env_id": st.integers(-2, 4)})
# Content-Encoding sent with a body that is not gzipped (mostly none); ``gzipped`` bodies always say gzip.
ENCODINGS = ["", "", "", "", "", "identity", "br", "gzip", "GZIP ", "x-gzip"]


def odd_bodies(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Near-valid or garbage JSON values; ``bytes`` for bodies that are not JSON at all."""
    return st.one_of(
        near_valid(valid),
        GARBAGE_JSON,
        st.binary(max_size=64),
        st.just(b""),
        st.just(b"{" * 5000),  # nesting deeper than the JSON parser's recursion
    )


# Each endpoint that reads a body, with what a valid body looks like.
POSTED = {
    "/register": REGISTRATIONS,
    "/register-env": ENV_REGISTRATIONS,
    "/disconnect-env": ENV_IDS,
    "/status-env": ENV_IDS,
    "/scored_data": groups(),
    "/scored_data_list": st.lists(groups(), min_size=1, max_size=3),
}


@st.composite
def odd_requests(draw: st.DrawFn) -> tuple[str, str, Any]:
    """``(method, path, body)``: an odd body for an endpoint that reads one, or any method on any path."""
    path = draw(st.sampled_from(sorted(POSTED)))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
        return method, draw(st.sampled_from([*POSTED, "/batch", "/nope", "/status/../batch"])), draw(GARBAGE_JSON)
    return ("GET" if path == "/status-env" else "POST"), path, draw(odd_bodies(POSTED[path]))


class TrajectoryApiMachine(RuleBasedStateMachine):
    """Valid traffic of a trainer and its environments, with odd requests of every kind mixed in."""

    def __init__(self) -> None:
        super().__init__()
        # Each refusal is logged as a warning: thousands of them would only slow the test down.
        logging.getLogger("hermes_nb.trajectory_api").setLevel(logging.ERROR)
        self.loop = asyncio.new_event_loop()
        self.app = create_app(ApiSettings(limits=LIMITS))
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://api")
        self.accepted = 0  # sequences in groups the API accepted
        self.served = 0  # sequences in batches it handed out
        self.step = 0
        self.registered = False

    @property
    def state(self) -> TrajectoryState:
        state: TrajectoryState = self.app.state.trajectory
        return state

    def teardown(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
        logging.getLogger("hermes_nb.trajectory_api").setLevel(logging.NOTSET)

    def send(
        self, method: str, path: str, body: Any = None, gzipped: bool = False, encoding: str = "", **kw: Any
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json", "content-encoding": encoding}
        if gzipped and content is not None:
            content, headers["content-encoding"] = gzip.compress(content), "gzip"
        response = self.loop.run_until_complete(
            self.client.request(method, path, content=content, headers=headers, **kw)
        )
        status = response.status_code
        back_pressure = status == 503 and path in CAPPED_POSTS and "retry-after" in response.headers
        assert status < 500 or back_pressure, (method, path, body, status, response.text)
        if response.status_code == 200 and path != "/reset_data":
            response.json()  # every answer is JSON that parses
        self.count(path, body, response)
        return response

    def count(self, path: str, body: Any, response: httpx.Response) -> None:
        """What an accepted request changed, in this machine's own books."""
        if response.status_code != 200:
            return
        if path == "/register" and not self.registered:
            self.registered = True
            self.step = Registration.model_validate(body).starting_step
        elif path == "/scored_data":
            self.accepted += len(body["tokens"])
        elif path == "/scored_data_list":
            self.accepted += sum(len(group["tokens"]) for group in body)
        elif path == "/batch" and (batch := response.json().get("batch")):
            self.served += sum(len(group["tokens"]) for group in batch)
            self.step += 1

    # ---- valid traffic ---------------------------------------------------------------------------------------
    @initialize(body=REGISTRATIONS)
    def register_first(self, body: dict[str, Any]) -> None:
        self.send("POST", "/register", body)

    @rule(body=REGISTRATIONS)
    def register_again(self, body: dict[str, Any]) -> None:
        self.send("POST", "/register", body)

    @rule()
    def batch(self) -> None:
        self.send("GET", "/batch")

    @rule(path=st.sampled_from(["/info", "/wandb_info", "/latest_example", "/health", "/"]))
    def read(self, path: str) -> None:
        self.send("GET", path)

    @rule(body=ENV_REGISTRATIONS)
    def register_env(self, body: dict[str, Any]) -> None:
        self.send("POST", "/register-env", body)

    @rule(body=ENV_IDS)
    def disconnect_env(self, body: dict[str, Any]) -> None:
        self.send("POST", "/disconnect-env", body)

    @rule(body=ENV_IDS | st.none(), query=st.none() | st.text(max_size=4) | st.integers(-2, 4).map(str))
    def status_env(self, body: Any, query: str | None) -> None:
        self.send("GET", "/status-env", body, params={"env_id": query} if query is not None else None)

    @rule(body=groups(), gzipped=st.booleans())
    def scored_data(self, body: dict[str, Any], gzipped: bool) -> None:
        self.send("POST", "/scored_data", body, gzipped)

    @rule(body=POSTED["/scored_data_list"], gzipped=st.booleans())
    def scored_data_list(self, body: list[dict[str, Any]], gzipped: bool) -> None:
        self.send("POST", "/scored_data_list", body, gzipped)

    @precondition(lambda self: self.accepted > self.served)
    @rule(method=st.sampled_from(["GET", "POST"]), dice=st.integers(0, 9))
    def reset(self, method: str, dice: int) -> None:
        if dice:
            return  # only one time in ten: a reset forgets the queue the other rules built up
        self.send(method, "/reset_data")
        self.accepted = self.served = self.step = 0
        self.registered = False

    # ---- odd traffic -----------------------------------------------------------------------------------------
    @rule(request=odd_requests(), gzipped=st.booleans(), encoding=st.sampled_from(ENCODINGS))
    def odd_request(self, request: tuple[str, str, Any], gzipped: bool, encoding: str) -> None:
        method, path, body = request
        self.send(method, path, body, gzipped, encoding)

    # ---- what must always hold -------------------------------------------------------------------------------
    @invariant()
    def sequences_held_are_those_accepted_less_those_served(self) -> None:
        queued = sum(unit.size for unit in self.state.queue)
        buffered = sum(group.group_size for waiting in self.state.buffers.values() for group in waiting)
        assert queued + buffered == self.accepted - self.served
        assert queued + buffered <= (LIMITS.max_queued_sequences or 0)

    @invariant()
    def the_step_counts_batches_served_since_the_first_registration(self) -> None:
        status = self.send("GET", "/status").json()
        assert status["current_step"] == self.step
        health = self.send("GET", "/health").json()
        assert health["queue_size"] == status["queue_size"]
        assert (status["queue_size"] == 0) == (not any(unit.size for unit in self.state.queue))


TrajectoryApiMachine.TestCase.settings = settings(
    max_examples=40,
    # No shrinking: shrinking a failing run of this machine takes minutes, past the test timeout, so the failure
    # would never be shown; an unshrunk run of 25 steps is still readable.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    stateful_step_count=25,
    deadline=None,  # two shared cores: a slow example is the machine, not a bug
    database=None,  # no .hypothesis folder in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_every_endpoint_answers_below_500_and_keeps_its_counters = TrajectoryApiMachine.TestCase
