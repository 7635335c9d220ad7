"""The trainer's side of the trajectory API: register, then pull batches (Atropos endpoints, plain httpx).

Both calls take a ``stop`` event so a SIGTERM during a wait ends it promptly instead of after a timeout.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx

from hermes_nb.protocol.trajectory import BatchResponse, HealthResponse, Registration, ScoredDataGroup

logger = logging.getLogger(__name__)

# How often an empty /batch is retried: short, because the trainer idles while it waits and the environment
# posts groups continuously; a local GET costs well under a millisecond.
BATCH_POLL_S = 0.02
# Retry interval while the API is not up yet (the supervisor starts it first, so this is brief).
REGISTER_RETRY_S = 0.1
REGISTER_TIMEOUT_S = 120.0


class ApiUnavailableError(RuntimeError):
    pass


class TrajectoryApi:
    def __init__(self, base_url: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/"), timeout=30.0, transport=transport)
        self.base_url = base_url

    def register(self, registration: Registration, stop: threading.Event, timeout: float = REGISTER_TIMEOUT_S) -> bool:
        """POST /register, retrying while the API is not reachable. False if stopped first."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            try:
                response = self._client.post("/register", json=registration.model_dump(mode="json"))
                response.raise_for_status()
                return True
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise ApiUnavailableError(f"trajectory API at {self.base_url} unreachable: {exc}") from exc
            stop.wait(REGISTER_RETRY_S)
        return False

    def next_batch(self, stop: threading.Event, poll_s: float = BATCH_POLL_S) -> list[ScoredDataGroup] | None:
        """GET /batch until a batch arrives; None if ``stop`` is set first."""
        while not stop.is_set():
            response = self._client.get("/batch")
            response.raise_for_status()
            batch = BatchResponse.model_validate(response.json()).batch
            if batch:
                return batch
            stop.wait(poll_s)
        return None

    def connected_envs(self) -> int | None:
        """How many environments are registered (``/health``); None when the API cannot tell (gone, or an
        ``atroposlib`` API, which has no ``/health``)."""
        try:
            response = self._client.get("/health", timeout=5.0)
        except httpx.TransportError:
            return None
        if response.is_error:
            return None
        try:
            return HealthResponse.model_validate(response.json()).num_envs
        except ValueError:
            return None

    def close(self) -> None:
        self._client.close()
