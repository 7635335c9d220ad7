"""Typed access to a trajectory API (ours, or an ``atroposlib run-api``): one client, an async and a sync face.

``TrajectoryClient`` (async) serves the environment host and tests; ``SyncTrajectoryClient`` serves the
trainer, whose loop runs in a plain thread stopped by a ``threading.Event``, and the run supervisor's polls.
Readiness (:meth:`SyncTrajectoryClient.readiness`) is read here, in one place, from what every Atropos API
answers: ``/status`` and ``/info``, plus ``/health`` where it exists (run-api has none). Both faces get every
endpoint of ``hermes_nb.trajectory_api.endpoints`` from one table (``_Endpoints``) and differ only in how they
send a call, so the two cannot drift apart. Every method returns the protocol model of the answer, or raises
:class:`TrajectoryAPIError` / :class:`TrajectoryAPIUnavailable`.

``transport`` replaces the network, e.g. ``httpx.ASGITransport(app)`` to talk to an app in-process.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar, overload

import httpx

from hermes_nb.protocol.auth import bearer_headers
from hermes_nb.protocol.trajectory import HealthResponse, Registration, ScoredDataGroup
from hermes_nb.system.net import CLIENT_KEEP_ALIVE_S
from hermes_nb.trajectory_api import endpoints
from hermes_nb.trajectory_api.endpoints import Call, TrajectoryAPIError, TrajectoryAPIUnavailable

__all__ = [
    "ApiReadiness",
    "SyncTrajectoryClient",
    "TrajectoryAPIError",
    "TrajectoryAPIUnavailable",
    "TrajectoryClient",
]

P = ParamSpec("P")
T = TypeVar("T")

# A batch of a large run is tens of MB of JSON; reading it on a busy two-core machine can take a while.
DEFAULT_TIMEOUT_S = 120.0
# An idle connection is dropped after CLIENT_KEEP_ALIVE_S, before any server closes it (hermes_nb.system.net).
_LIMITS = httpx.Limits(keepalive_expiry=CLIENT_KEEP_ALIVE_S)
# How often the trainer retries an empty /batch: short, because the trainer idles while it waits and the
# environment posts groups continuously; a local GET costs well under a millisecond.
BATCH_POLL_S = 0.02
# Retry interval while the API is not up yet (the supervisor starts it beside the trainer, so this is brief).
REGISTER_RETRY_S = 0.1
REGISTER_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ApiReadiness:
    """What a poller needs to know of any trajectory API: ours, or an ``atroposlib run-api``.

    Read from ``/status`` and ``/info``, which every Atropos API answers from its start (run-api answers them
    before any registration too), and from ``/health`` only where it exists: run-api has none, so there
    ``num_envs`` is ``None``, "cannot tell".
    """

    current_step: int
    queue_size: int
    # The first registered trainer's settings (the API keeps them); None while no trainer has registered.
    batch_size: int | None
    max_token_len: int | None
    num_envs: int | None

    @property
    def trainer_registered(self) -> bool:
        return self.batch_size is not None


class Endpoint(Generic[P, T]):
    """A client method made from an endpoint function: ``T`` on the sync face, awaitable on the async one."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build

    @overload
    def __get__(self, face: None, owner: type) -> Endpoint[P, T]: ...
    @overload
    def __get__(self, face: TrajectoryClient, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, face: SyncTrajectoryClient, owner: type) -> Callable[P, T]: ...
    def __get__(self, face: TrajectoryClient | SyncTrajectoryClient | None, owner: type) -> Any:
        if face is None:
            return self
        build = self.build

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return face.send(build(*args, **kwargs))

        return functools.update_wrapper(method, build)


class _Endpoints:
    """The endpoints both faces offer, each written once in ``endpoints``."""

    # everyone
    health = Endpoint(endpoints.health)
    info = Endpoint(endpoints.info)
    status = Endpoint(endpoints.status)
    wandb_info = Endpoint(endpoints.wandb_info)
    latest_example = Endpoint(endpoints.latest_example)
    reset_data = Endpoint(endpoints.reset_data)
    # trainer
    register = Endpoint(endpoints.register)
    batch = Endpoint(endpoints.batch)
    # environment
    register_env = Endpoint(endpoints.register_env)
    disconnect_env = Endpoint(endpoints.disconnect_env)
    status_env = Endpoint(endpoints.status_env)
    post_scored_data = Endpoint(endpoints.post_scored_data)
    post_scored_data_list = Endpoint(endpoints.post_scored_data_list)

    def __init__(self, base_url: str, secret: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        # The run's secret, sent to the run's own API only (an external API never gets it): see protocol.auth.
        self._auth = bearer_headers(secret)

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any], timeout: float | None) -> httpx.Request:
        """Every request of both faces is built here: what all of them must carry is added in this one place."""
        return http.build_request(
            call.method,
            call.path,
            content=call.content,
            headers={**(call.headers or {}), **self._auth} if self._auth else call.headers,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )


class TrajectoryClient(_Endpoints):
    """``async with TrajectoryClient("http://127.0.0.1:8000") as api: await api.batch()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
        secret: str | None = None,
    ) -> None:
        super().__init__(base_url, secret)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport, limits=_LIMITS)

    async def send(self, call: Call[T], *, timeout: float | None = None) -> T:
        """``call``'s answer; ``timeout`` replaces the client's for this request."""
        try:
            response = await self._http.send(self._request(self._http, call, timeout))
        except httpx.TransportError as exc:
            raise call.unreachable(self.base_url, exc) from exc
        return call.answer(response)

    async def __aenter__(self) -> TrajectoryClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()


class SyncTrajectoryClient(_Endpoints):
    """``with SyncTrajectoryClient("http://127.0.0.1:8000") as api: api.health()``; plus the trainer's waits."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        secret: str | None = None,
    ) -> None:
        super().__init__(base_url, secret)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport, limits=_LIMITS)
        # Learned from the first 404: an atroposlib run-api has no /health, and asking again on every poll
        # would only fill its log with 404s.
        self._health_missing = False

    def send(self, call: Call[T], *, timeout: float | None = None) -> T:
        """``call``'s answer; ``timeout`` replaces the client's for this request."""
        try:
            response = self._http.send(self._request(self._http, call, timeout))
        except httpx.TransportError as exc:
            raise call.unreachable(self.base_url, exc) from exc
        return call.answer(response)

    def health_or_none(self, *, timeout: float | None = None) -> HealthResponse | None:
        """``/health``, or ``None`` when the API cannot tell: not up, gone, or an ``atroposlib run-api`` (no
        ``/health``). For pollers, to whom all of these mean "not (or no longer) ready"."""
        try:
            return self.send(endpoints.health(), timeout=timeout)
        except TrajectoryAPIError:
            return None

    def readiness(self, *, timeout: float | None = None) -> ApiReadiness:
        """The API's step, queue, registered trainer and (where ``/health`` exists) environment count. Raises
        :class:`TrajectoryAPIUnavailable` when the API cannot be reached, :class:`TrajectoryAPIError` when what
        answers is not a trajectory API."""
        status = self.send(endpoints.status(), timeout=timeout)
        info = self.send(endpoints.info(), timeout=timeout)
        registered = info.batch_size > 0  # both APIs answer batch_size -1 until a trainer registers
        return ApiReadiness(
            current_step=status.current_step,
            queue_size=status.queue_size,
            batch_size=info.batch_size if registered else None,
            max_token_len=info.max_token_len if registered else None,
            num_envs=self._num_envs(timeout),
        )

    def readiness_or_none(self, *, timeout: float | None = None) -> ApiReadiness | None:
        """:meth:`readiness`, or ``None`` when the API cannot answer it (not up, gone, not a trajectory API)."""
        try:
            return self.readiness(timeout=timeout)
        except TrajectoryAPIError:
            return None

    def _num_envs(self, timeout: float | None) -> int | None:
        if self._health_missing:
            return None
        try:
            return self.send(endpoints.health(), timeout=timeout).num_envs
        except TrajectoryAPIUnavailable:
            raise
        except TrajectoryAPIError as exc:
            self._health_missing = exc.status_code == 404
            return None

    def register_when_up(
        self, registration: Registration, stop: threading.Event, timeout: float = REGISTER_TIMEOUT_S
    ) -> int | None:
        """``/register``, retried while the API cannot be reached; the requester id, or ``None`` if ``stop`` is
        set first. Raises :class:`TrajectoryAPIUnavailable` once ``timeout`` has passed."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            try:
                return self.register(registration)
            except TrajectoryAPIUnavailable:
                if time.monotonic() > deadline:
                    raise
            stop.wait(REGISTER_RETRY_S)
        return None

    def next_batch(self, stop: threading.Event, poll_s: float = BATCH_POLL_S) -> list[ScoredDataGroup] | None:
        """``/batch`` until a batch arrives; ``None`` if ``stop`` is set first."""
        while not stop.is_set():
            batch = self.batch()
            if batch:
                return batch
            stop.wait(poll_s)
        return None

    def __enter__(self) -> SyncTrajectoryClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
