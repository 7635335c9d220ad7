"""The per-run secret on the wire: what a run's servers require, and how a client presents it.

On a shared host loopback is not private: any local user could post trajectories to a run's API, pull its
batches or query its policy. So each run has a random secret (``hermes_nb.system.secrets`` makes and stores it)
and its servers answer 401 to any request that does not carry it, ``/health`` included: one rule without
exceptions, and a health answer would tell another user the step, the environments and the model.

A client presents the secret either way (both are what unmodified clients can do):

- as the bearer API key, ``Authorization: Bearer <secret>`` (the OpenAI SDK's ``api_key``), or
- as a capability URL prefix, ``http://127.0.0.1:PORT/<secret>/v1/...`` (for clients that take only a base URL,
  such as atroposlib's ``rollout_server_url``), as Jupyter does with its token.

The secret reaches a run's processes through their environment, never argv. Standard library only: the
atroposlib bridge imports this module in the environment's own Python.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from hermes_nb.protocol.redaction import REDACTED

# The run's secret: the run's servers (trajectory API, inference server) require it when it is set, and clients
# of the run's own inference server send it.
SECRET_ENV = "HERMES_NB_RUN_SECRET"
# What a run's trajectory API clients send: the run's secret when the run's API is its own, unset when the run
# trains from an external API (that API is not ours, so it never sees our secret).
API_SECRET_ENV = "HERMES_NB_RUN_API_SECRET"

UNAUTHORIZED_MESSAGE = (
    "this server belongs to a hermes-nb run: send the run's secret as 'Authorization: Bearer <secret>' or as the "
    "URL prefix /<secret>/ (rl_check_status(run).inference_url / .api_url give working URLs)"
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def secret_from_env() -> str | None:
    return os.environ.get(SECRET_ENV) or None


def api_secret_from_env() -> str | None:
    return os.environ.get(API_SECRET_ENV) or None


def bearer_headers(secret: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def capability_url(url: str, secret: str | None) -> str:
    """``http://host:port[/path]`` -> ``http://host:port/<secret>[/path]``: the secret travels in the URL."""
    if not secret:
        return url
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host}/{secret}{slash}{path}".rstrip("/")


class SecretGuard:
    """ASGI middleware: requests that carry ``secret`` (bearer, or the URL prefix, which it strips) pass; every
    other one gets a 401 with a JSON body (OpenAI's error shape plus ``detail``, the trajectory API's)."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self._secret = secret.encode()
        self._prefix = f"/{secret}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stripped = self._strip_prefix(scope)
        if stripped is not None:
            await self.app(stripped, receive, send)
            return
        if self._bearer_ok(scope):
            await self.app(scope, receive, send)
            return
        await _unauthorized(send)

    def _strip_prefix(self, scope: Scope) -> Scope | None:
        path: str = scope["path"]
        first, _, rest = path[1:].partition("/")
        if not hmac.compare_digest(f"/{first}".encode(), self._prefix.encode()):
            return None
        inner = "/" + rest
        raw = scope.get("raw_path")
        stripped = dict(scope, path=inner)
        if isinstance(raw, bytes):
            stripped["raw_path"] = raw[len(self._prefix) :] or b"/"
        return stripped

    def _bearer_ok(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name.lower() != b"authorization":
                continue
            scheme, _, token = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._secret):
                return True
        return False


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {"detail": UNAUTHORIZED_MESSAGE, "error": {"message": UNAUTHORIZED_MESSAGE, "type": "invalid_request_error"}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def require_run_secret(app: Any, secret: str | None = None) -> None:
    """Guard a Starlette/FastAPI ``app`` with ``secret`` (default: the run's, from ``SECRET_ENV``). Without a
    secret (a server started by hand, outside a run) the app stays open, as an atroposlib run-api is."""
    secret = secret or secret_from_env()
    if not secret:
        return
    app.add_middleware(SecretGuard, secret=secret)
    # uvicorn's access log (when on) prints the path as the client sent it, capability prefix included.
    logging.getLogger("uvicorn.access").addFilter(HideSecret(secret))


class HideSecret(logging.Filter):
    """Replaces ``secret`` with ``REDACTED`` in a log record's arguments (uvicorn's access lines carry the path)."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a.replace(self._secret, REDACTED) if isinstance(a, str) else a for a in record.args)
        return True
