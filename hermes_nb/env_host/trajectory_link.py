"""The environment's policy over ``TrajectoryClient``: wait for the trainer, ride out API hiccups, remember env_id.

``TrajectoryClient`` speaks the Atropos endpoints; this adds what an environment process needs around it:
registration that waits while the API answers "wait for trainer to start", and bounded retries when the API
is briefly unreachable or answers 5xx (a 4xx is our request's fault and is raised at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from hermes_nb.env.coalesce import Coalescer
from hermes_nb.protocol.auth import api_secret_from_env
from hermes_nb.protocol.trajectory import (
    EnvStatusResponse,
    InfoResponse,
    RegisterEnv,
    RegisterEnvResponse,
    ScoredDataGroup,
)
from hermes_nb.trajectory_api.client import TrajectoryAPIError, TrajectoryAPIUnavailable, TrajectoryClient

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["TrajectoryAPIError", "TrajectoryLink"]

# The API comes up before the trainer registers; the environment waits for that. A trainer loading a model on
# a busy CPU can take minutes, so registration waits long; the supervisor kills us if the run fails first.
REGISTER_TIMEOUT_S = 600.0
REGISTER_POLL_S = 0.5
# A transient API hiccup (restart, overload) is retried this long before the host gives up on the API.
REQUEST_RETRY_S = 30.0
REQUEST_TIMEOUT_S = 30.0
# How long disconnect-env may take at shutdown: the API may already be gone, and exiting matters more.
DISCONNECT_TIMEOUT_S = 5.0
# A full queue (503: the trainer is not pulling) is waited out for as long as it lasts: a stalled trainer may
# resume after minutes, and the group is the environment's work. The supervisor ends us if the run ends.
QUEUE_FULL = 503
# Groups finished together are posted together (one /scored_data_list), up to this many per request.
MAX_GROUPS_PER_POST = 64


class TrajectoryLink:
    """One environment's connection to the trajectory API at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_seconds: float = REQUEST_RETRY_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_seconds = retry_seconds
        self.env_id: int | None = None
        # The run's secret when the API is the run's own (the supervisor sets it; an external API never gets it).
        self.client = TrajectoryClient(
            self.base_url, timeout=REQUEST_TIMEOUT_S, transport=transport, secret=api_secret_from_env()
        )
        self._posts: Coalescer[None, ScoredDataGroup, None] = Coalescer(
            self._post_groups, max_items=MAX_GROUPS_PER_POST
        )

    async def register(
        self, request: RegisterEnv, *, timeout: float = REGISTER_TIMEOUT_S, stop: asyncio.Event | None = None
    ) -> RegisterEnvResponse | None:
        """Register, waiting while the API answers "wait for trainer to start". ``None`` when ``stop`` is set."""
        deadline = time.monotonic() + timeout
        last_status = ""
        while stop is None or not stop.is_set():
            response = await self._retrying(lambda: self.client.register_env(request))
            if response.status == "success" and response.env_id is not None:
                self.env_id = response.env_id
                return response
            if response.status != last_status:
                logger.info("trajectory API says %r; waiting for the trainer to register", response.status)
                last_status = response.status
            if time.monotonic() > deadline:
                raise TrajectoryAPIError(
                    f"trajectory API {self.base_url} still says {response.status!r} after {timeout:.0f} s; "
                    "did the trainer start?"
                )
            await _sleep_or_stop(REGISTER_POLL_S, stop)
        return None

    async def info(self) -> InfoResponse:
        return await self._retrying(self.client.info)

    async def status(self) -> EnvStatusResponse:
        env_id = self._env_id()
        return await self._retrying(lambda: self.client.status_env(env_id))

    async def post_group(self, group: ScoredDataGroup) -> None:
        """Queue ``group`` for the API; groups posted at the same time share one request
        (``hermes_nb.env.coalesce``). Returns once the API has accepted it."""
        await self._posts.submit(None, group.model_copy(update={"env_id": self._env_id()}))

    async def _post_groups(self, _: None, groups: list[ScoredDataGroup]) -> list[BaseException | None]:
        if len(groups) > 1:
            try:
                await self._retrying(lambda: self.client.post_scored_data_list(groups), wait_while_full=True)
                return [None] * len(groups)
            except TrajectoryAPIError as exc:
                if exc.status_code is None or exc.status_code >= 500:
                    raise
            # A 4xx names one bad group; the others that happened to share its request must still arrive.
        sent = await asyncio.gather(*(self._post_one(g) for g in groups), return_exceptions=True)
        return [outcome if isinstance(outcome, BaseException) else None for outcome in sent]

    async def _post_one(self, group: ScoredDataGroup) -> None:
        await self._retrying(lambda: self.client.post_scored_data(group), wait_while_full=True)

    async def disconnect(self) -> None:
        """Tell the API we are gone; best effort (the API may already be down at the end of a run)."""
        if self.env_id is None:
            return
        try:
            await asyncio.wait_for(self.client.disconnect_env(self.env_id), DISCONNECT_TIMEOUT_S)
            logger.info("disconnected from the trajectory API")
        except (TrajectoryAPIError, TimeoutError) as exc:
            logger.info("trajectory API did not take disconnect-env (%s)", exc or type(exc).__name__)

    async def aclose(self) -> None:
        await self.client.aclose()

    def _env_id(self) -> int:
        if self.env_id is None:
            raise TrajectoryAPIError("not registered with the trajectory API yet")
        return self.env_id

    async def _retrying(self, call: Callable[[], Awaitable[T]], *, wait_while_full: bool = False) -> T:
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.2
        while True:
            try:
                return await call()
            except TrajectoryAPIError as exc:
                transient = isinstance(exc, TrajectoryAPIUnavailable) or (exc.status_code or 0) >= 500
                if wait_while_full and exc.status_code == QUEUE_FULL:
                    deadline = time.monotonic() + self.retry_seconds  # not a fault: the queue is full
                elif not transient or time.monotonic() + delay > deadline:
                    raise
                logger.debug("trajectory API: %s; retrying in %.1f s", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
