"""The FastAPI app: thin routes over :class:`~hermes_nb.trajectory_api.state.TrajectoryState`.

Each route reads and validates its body (size limit, gzip, strict JSON) off the event loop, then calls one
synchronous state method on the loop. Because state methods never await, requests cannot interleave inside
one, which is the whole concurrency story. Responses are serialised by pydantic directly (not FastAPI's
``jsonable_encoder``, which walks every token of a batch in Python).
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from hermes_nb.protocol.auth import require_run_secret
from hermes_nb.protocol.trajectory import (
    BatchResponse,
    EnvIdentifier,
    RegisterEnv,
    RegisterResponse,
    Registration,
    ScoredDataGroup,
)
from hermes_nb.system.net import LOOPBACK
from hermes_nb.trajectory_api import body
from hermes_nb.trajectory_api.state import ApiLimits, RequestRejected, TrajectoryState

T = TypeVar("T")
log = logging.getLogger("hermes_nb.trajectory_api")

# atroposlib's default rollout_server_url is http://localhost:8000, so an unconfigured atroposlib env finds us.
DEFAULT_PORT = 8000
NOT_REGISTERED = "Trainer not registered. Call /register first."
# Below this a body parses in a few milliseconds, less than the hop to a worker thread and back.
_INLINE_PARSE_BYTES = 256 * 1024

_GROUP = TypeAdapter(ScoredDataGroup)
_GROUPS = TypeAdapter(list[ScoredDataGroup])
_REGISTRATION = TypeAdapter(Registration)
_REGISTER_ENV = TypeAdapter(RegisterEnv)
_ENV_ID = TypeAdapter(EnvIdentifier)


class ApiSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = LOOPBACK
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    limits: ApiLimits = ApiLimits()
    # uvicorn's per-request access log: one line per /batch poll and /status-env call drowns the log.
    access_log: bool = False
    log_level: str = "info"


def _json(model: BaseModel, **dump: Any) -> Response:
    return Response(model.model_dump_json(**dump), media_type="application/json")


async def _read_raw(request: Request, limit: int) -> bytes:
    """The raw body, at most ``limit`` bytes kept. A larger body is read to its end and dropped, so the
    client gets our 413 instead of a connection reset in the middle of its upload."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size <= limit:
                chunks.append(chunk)
    except ClientDisconnect:
        raise RequestRejected(400, "body: the client disconnected before sending all of it") from None
    if size > limit:
        raise body.too_large(size, limit)
    return b"".join(chunks)


async def _read(request: Request, adapter: TypeAdapter[T], root: str = "") -> T:
    limit = _state(request).limits.max_body_bytes
    return await _parse(await _read_raw(request, limit), request, adapter, root, limit)


async def _parse(raw: bytes, request: Request, adapter: TypeAdapter[T], root: str, limit: int) -> T:
    encoding = request.headers.get("content-encoding", "")
    if len(raw) < _INLINE_PARSE_BYTES:
        return _decode_and_validate(raw, encoding, adapter, root, limit)
    # Parsing a large body takes a while; in a worker thread, /health and /batch keep answering meanwhile.
    return await run_in_threadpool(_decode_and_validate, raw, encoding, adapter, root, limit)


def _decode_and_validate(raw: bytes, encoding: str, adapter: TypeAdapter[T], root: str, limit: int) -> T:
    return body.validate(adapter, body.parse_json(body.decode(raw, encoding, limit)), root)


def _state(request: Request) -> TrajectoryState:
    state: TrajectoryState = request.app.state.trajectory
    return state


async def _rejected(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestRejected)  # registered for this type only
    log.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, exc)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return JSONResponse({"detail": str(exc)}, status_code=exc.status_code, headers=headers)


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    """The trajectory API. Its state lives in ``app.state.trajectory``."""
    settings = settings or ApiSettings()
    app = FastAPI(title="hermes-nb trajectory API (Atropos wire protocol)")
    app.state.trajectory = TrajectoryState(settings.limits)
    app.add_exception_handler(RequestRejected, _rejected)
    require_run_secret(app)
    _add_trainer_routes(app)
    _add_env_routes(app)
    _add_common_routes(app)
    return app


def _add_trainer_routes(app: FastAPI) -> None:
    @app.post("/register")
    async def register(request: Request) -> Response:
        registration = await _read(request, _REGISTRATION)
        return _json(RegisterResponse(uuid=_state(request).register(registration)))

    @app.get("/batch")
    async def batch(request: Request) -> Response:
        state = _state(request)
        if state.registration is None:
            # atroposlib's answer before any /register.
            return _json(BatchResponse(batch=[], status="error", message=NOT_REGISTERED))
        return _json(BatchResponse(batch=state.next_batch()), include={"batch"})

    @app.get("/info")
    async def info(request: Request) -> Response:
        # exclude_none: without a vocab_size the answer is atroposlib's, key for key.
        return _json(_state(request).info(), exclude_none=True)

    @app.get("/wandb_info")
    async def wandb_info(request: Request) -> Response:
        return _json(_state(request).wandb_info())


def _add_env_routes(app: FastAPI) -> None:
    @app.post("/register-env")
    async def register_env(request: Request) -> Response:
        registration = await _read(request, _REGISTER_ENV)
        return _json(_state(request).register_env(registration), exclude_none=True)

    @app.post("/disconnect-env")
    async def disconnect_env(request: Request) -> Response:
        env = await _read(request, _ENV_ID)
        return _json(_state(request).disconnect_env(env.env_id), exclude_none=True)

    @app.get("/status-env")
    async def status_env(request: Request) -> Response:
        env_id = await _env_id_from_body_or_query(request)
        # exclude_none: without a cap (no queue_room) the answer is atroposlib's, key for key.
        return _json(_state(request).status_env(env_id), exclude_none=True)

    @app.post("/scored_data")
    async def scored_data(request: Request) -> Response:
        group = await _read(request, _GROUP)
        return _json(_state(request).add_group(group), exclude_none=True)

    @app.post("/scored_data_list")
    async def scored_data_list(request: Request) -> Response:
        groups = await _read(request, _GROUPS, root="scored_data_list")
        return _json(_state(request).add_groups(groups), exclude_none=True)


async def _env_id_from_body_or_query(request: Request) -> int:
    """atroposlib's environments send ``{"env_id": N}`` as the body of this GET; ``?env_id=N`` also works."""
    limit = _state(request).limits.max_body_bytes
    raw = await _read_raw(request, limit)
    if raw.strip():
        return (await _parse(raw, request, _ENV_ID, "", limit)).env_id
    query = request.query_params.get("env_id")
    if query is None:
        raise RequestRejected(422, 'env_id: missing; send {"env_id": N} as the body or ?env_id=N')
    return body.validate(_ENV_ID, {"env_id": query}).env_id


def _add_common_routes(app: FastAPI) -> None:
    @app.get("/")
    async def root() -> dict[str, str]:
        return {"message": "hermes-nb trajectory API (Atropos wire protocol)"}

    @app.get("/health")
    async def health(request: Request) -> Response:
        return _json(_state(request).health())

    @app.get("/status")
    async def status(request: Request) -> Response:
        return _json(_state(request).status())

    @app.get("/latest_example")
    async def latest_example(request: Request) -> Response:
        latest = _state(request).latest_example()
        if latest is None:
            return JSONResponse({key: [] for key in _EMPTY_EXAMPLE_KEYS})
        return _json(latest)

    @app.api_route("/reset_data", methods=["GET", "POST"])
    async def reset_data(request: Request) -> Response:
        _state(request).reset()
        log.info("state reset (/reset_data)")
        return PlainTextResponse("Reset successful")


# What atroposlib's /latest_example answers, as empty lists, before any group arrived.
_EMPTY_EXAMPLE_KEYS = (
    "tokens",
    "masks",
    "scores",
    "advantages",
    "ref_logprobs",
    "generation_params",
    "inference_logprobs",
    "messages",
    "images",
)
