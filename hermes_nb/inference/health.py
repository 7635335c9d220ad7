"""The inference server's ``/health``, read as its protocol record: for pollers waiting until a policy serves.

The server answers 503 while it loads its first policy and 401 to a request without the run's secret
(``protocol.auth``); to a poller both mean "not serving yet", as does a server that is not up.
"""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from hermes_nb.protocol.auth import bearer_headers
from hermes_nb.protocol.inference import HealthResponse


def health_or_none(url: str, *, secret: str | None, timeout: float) -> HealthResponse | None:
    """``url``'s ``/health`` (``url`` is the server's root, ``http://127.0.0.1:PORT``), or ``None`` while it does
    not serve a policy: not up, still loading, refusing us, or not an inference server."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/health", timeout=timeout, headers=bearer_headers(secret))
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return HealthResponse.model_validate_json(response.content)
    except ValidationError:
        return None
