"""Every request a client makes to a trajectory API, and how its answer reads. No I/O here.

Each endpoint is a function that returns a :class:`Call`: the method, path and body of the request, and the
reader that turns the answer into its protocol model. The clients in ``hermes_nb.trajectory_api.client`` only
send calls, so the sync and the async client speak the same wire protocol by construction.

A refused request raises :class:`TrajectoryAPIError` carrying the server's one-line reason; an unreachable
server raises :class:`TrajectoryAPIUnavailable`, so a polling loop can tell "retry later" from "fix the request".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from hermes_nb.errors import TrajectoryAPIError, TrajectoryAPIUnavailable
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

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_JSON_BODY = {"Content-Type": "application/json"}
# How much of an answer that is not the protocol goes into the error: enough to recognise it, one line's worth.
_SHOWN_CHARS = 200


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request: ``content`` is its JSON body (``None``: no body); ``read`` turns a successful answer into ``T``."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    content: str | None = None

    @property
    def headers(self) -> dict[str, str] | None:
        return _JSON_BODY if self.content is not None else None

    def answer(self, response: httpx.Response) -> T:
        if response.is_error:
            raise TrajectoryAPIError(f"{self.path}: {_reason(response)}", status_code=response.status_code)
        try:
            return self.read(response)
        except ValidationError as exc:
            raise TrajectoryAPIError(f"{self.path}: unexpected answer: {exc.errors()[0]['msg']}") from None
        except ValueError:
            # The readers are the functions below: a ValueError that is no ValidationError is the JSON decoder's.
            shown = response.text[:_SHOWN_CHARS]
            raise TrajectoryAPIError(f"{self.path}: the answer is not JSON: {shown!r}") from None

    def unreachable(self, base_url: str, exc: httpx.TransportError) -> TrajectoryAPIUnavailable:
        cause = f"{type(exc).__name__} {exc}".strip()
        return TrajectoryAPIUnavailable(f"trajectory API at {base_url} unreachable on {self.path}: {cause}")


def _reason(response: httpx.Response) -> str:
    """The server's one-line reason: our ``{"detail": "..."}``, FastAPI's list of errors, or the text."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        detail = f"{'.'.join(str(p) for p in first.get('loc', []))}: {first.get('msg')}"
    text = detail if isinstance(detail, str) else response.text[:_SHOWN_CHARS]
    return f"HTTP {response.status_code}: {text}"


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate(response.json())


def _get(path: str, model: type[M], payload: BaseModel | None = None) -> Call[M]:
    content = payload.model_dump_json() if payload is not None else None
    return Call("GET", path, _model(model), content)


def _post(path: str, model: type[M], payload: BaseModel) -> Call[M]:
    return Call("POST", path, _model(model), payload.model_dump_json())


# ---- everyone ----------------------------------------------------------------------------------------------
def health() -> Call[HealthResponse]:
    """Who registered, and the queue (hermes-nb's API only: an ``atroposlib run-api`` has no ``/health``)."""
    return _get("/health", HealthResponse)


def info() -> Call[InfoResponse]:
    return _get("/info", InfoResponse)


def status() -> Call[StatusResponse]:
    return _get("/status", StatusResponse)


def wandb_info() -> Call[WandbInfo]:
    return _get("/wandb_info", WandbInfo)


def latest_example() -> Call[ScoredDataGroup | None]:
    """The group queued last, or ``None`` when nothing was posted yet."""
    return Call("GET", "/latest_example", _read_latest_example)


def _read_latest_example(response: httpx.Response) -> ScoredDataGroup | None:
    data = response.json()
    if isinstance(data, dict) and not data.get("tokens"):
        return None
    return ScoredDataGroup.model_validate(data)


def reset_data() -> Call[None]:
    """Empty the API: registrations, queue and step. The answer carries nothing to read."""
    return Call("GET", "/reset_data", lambda _: None)


# ---- trainer -----------------------------------------------------------------------------------------------
def register(registration: Registration) -> Call[int]:
    """Register the trainer; answers this requester's id."""
    read = _model(RegisterResponse)
    return Call("POST", "/register", lambda response: read(response).uuid, registration.model_dump_json())


def batch() -> Call[list[ScoredDataGroup] | None]:
    """The next batch (one trainer step), or ``None`` while too little data is queued."""
    return Call("GET", "/batch", _read_batch)


def _read_batch(response: httpx.Response) -> list[ScoredDataGroup] | None:
    answer = BatchResponse.model_validate_json(response.content)  # parsed by pydantic: a batch is every token
    if answer.status == "error":
        raise TrajectoryAPIError(f"/batch: {answer.message or 'the API refused to form a batch'}")
    return answer.batch


# ---- environment -------------------------------------------------------------------------------------------
def register_env(registration: RegisterEnv) -> Call[RegisterEnvResponse]:
    """``status == "success"`` with an ``env_id``, or ``"wait for trainer to start"``: retry later."""
    return _post("/register-env", RegisterEnvResponse, registration)


def disconnect_env(env_id: int) -> Call[DisconnectEnvResponse]:
    return _post("/disconnect-env", DisconnectEnvResponse, EnvIdentifier(env_id=env_id))


def status_env(env_id: int) -> Call[EnvStatusResponse]:
    # As a JSON body on a GET, like atroposlib's environments: an atroposlib run-api accepts nothing else.
    return _get("/status-env", EnvStatusResponse, EnvIdentifier(env_id=env_id))


def post_scored_data(group: ScoredDataGroup) -> Call[ScoredDataResponse]:
    return _post("/scored_data", ScoredDataResponse, group)


def post_scored_data_list(groups: Sequence[ScoredDataGroup]) -> Call[ScoredDataListResponse]:
    content = "[" + ",".join(g.model_dump_json() for g in groups) + "]"
    return Call("POST", "/scored_data_list", _model(ScoredDataListResponse), content)
