"""``TrajectoryClient``: typed async access to a trajectory API (ours, or an ``atroposlib run-api``).

Used by the trainer (register, batch, status) and the environment runtime (register_env, post_scored_data,
status_env). Every method returns the protocol model of the answer. A refused request raises
:class:`TrajectoryAPIError` carrying the server's one-line reason; an unreachable server raises
:class:`TrajectoryAPIUnavailable`, so a polling loop can tell "retry later" from "fix the request".
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.trajectory import (
    BatchResponse,
    DisconnectEnvResponse,
    EnvIdentifier,
    EnvStatusResponse,
    HealthResponse,
    InfoResponse,
    RegisterEnv,
    RegisterEnvResponse,
    RegisterResponse,
    Registration,
    ScoredDataGroup,
    ScoredDataListResponse,
    ScoredDataResponse,
    StatusResponse,
    WandbInfo,
)

M = TypeVar("M", bound=BaseModel)

# A batch of a large run is tens of MB of JSON; reading it on a busy two-core machine can take a while.
DEFAULT_TIMEOUT_S = 120.0


class TrajectoryAPIError(HermesNBError):
    """The API refused a request or answered something that is not the protocol. ``status_code`` is the
    HTTP status (``None`` when the answer itself was malformed)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class TrajectoryAPIUnavailable(TrajectoryAPIError):
    """The API could not be reached (not started yet, stopped, or too slow to answer)."""


class TrajectoryClient:
    """``async with TrajectoryClient("http://127.0.0.1:8000") as api: await api.batch()``.

    ``transport`` replaces the network, e.g. ``httpx.ASGITransport(app)`` to talk to an app in-process.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport)

    async def __aenter__(self) -> TrajectoryClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---- everyone ----------------------------------------------------------------------------------------
    async def health(self) -> HealthResponse:
        return await self._call("GET", "/health", HealthResponse)

    async def info(self) -> InfoResponse:
        return await self._call("GET", "/info", InfoResponse)

    async def status(self) -> StatusResponse:
        return await self._call("GET", "/status", StatusResponse)

    async def wandb_info(self) -> WandbInfo:
        return await self._call("GET", "/wandb_info", WandbInfo)

    async def latest_example(self) -> ScoredDataGroup | None:
        data = await self._request("GET", "/latest_example")
        if isinstance(data, dict) and not data.get("tokens"):
            return None
        return self._parse(ScoredDataGroup, data, "/latest_example")

    async def reset_data(self) -> None:
        await self._send("GET", "/reset_data")

    # ---- trainer -----------------------------------------------------------------------------------------
    async def register(self, registration: Registration) -> int:
        """Register the trainer; returns this requester's id."""
        answer = await self._call("POST", "/register", RegisterResponse, registration)
        return answer.uuid

    async def batch(self) -> list[ScoredDataGroup] | None:
        """The next batch (one trainer step), or ``None`` while too little data is queued."""
        answer = await self._call("GET", "/batch", BatchResponse)
        if answer.status == "error":
            raise TrajectoryAPIError(f"/batch: {answer.message or 'the API refused to form a batch'}")
        return answer.batch

    # ---- environment -------------------------------------------------------------------------------------
    async def register_env(self, registration: RegisterEnv) -> RegisterEnvResponse:
        """``status == "success"`` with an ``env_id``, or ``"wait for trainer to start"``: retry later."""
        return await self._call("POST", "/register-env", RegisterEnvResponse, registration)

    async def disconnect_env(self, env_id: int) -> DisconnectEnvResponse:
        return await self._call("POST", "/disconnect-env", DisconnectEnvResponse, EnvIdentifier(env_id=env_id))

    async def status_env(self, env_id: int) -> EnvStatusResponse:
        # As a JSON body on a GET, like atroposlib's environments: an atroposlib run-api accepts nothing else.
        return await self._call("GET", "/status-env", EnvStatusResponse, EnvIdentifier(env_id=env_id))

    async def post_scored_data(self, group: ScoredDataGroup) -> ScoredDataResponse:
        return await self._call("POST", "/scored_data", ScoredDataResponse, group)

    async def post_scored_data_list(self, groups: Sequence[ScoredDataGroup]) -> ScoredDataListResponse:
        content = "[" + ",".join(g.model_dump_json() for g in groups) + "]"
        data = await self._request("POST", "/scored_data_list", content)
        return self._parse(ScoredDataListResponse, data, "/scored_data_list")

    # ---- plumbing ----------------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, model: type[M], payload: BaseModel | None = None) -> M:
        content = payload.model_dump_json() if payload is not None else None
        return self._parse(model, await self._request(method, path, content), path)

    async def _request(self, method: str, path: str, content: str | None = None) -> Any:
        response = await self._send(method, path, content)
        try:
            return response.json()
        except ValueError:
            raise TrajectoryAPIError(f"{path}: the answer is not JSON: {response.text[:200]!r}") from None

    async def _send(self, method: str, path: str, content: str | None = None) -> httpx.Response:
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            response = await self._http.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise TrajectoryAPIUnavailable(
                f"trajectory API at {self.base_url} unreachable on {path}: {type(exc).__name__} {exc}".strip()
            ) from exc
        if response.is_error:
            raise TrajectoryAPIError(f"{path}: {_reason(response)}", status_code=response.status_code)
        return response

    @staticmethod
    def _parse(model: type[M], data: Any, path: str) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise TrajectoryAPIError(f"{path}: unexpected answer: {exc.errors()[0]['msg']}") from None


def _reason(response: httpx.Response) -> str:
    """The server's one-line reason: our ``{"detail": "..."}``, FastAPI's list of errors, or the text."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        detail = f"{'.'.join(str(p) for p in first.get('loc', []))}: {first.get('msg')}"
    text = detail if isinstance(detail, str) else response.text[:200]
    return f"HTTP {response.status_code}: {text}"
