"""How a secret is hidden in anything shown or written: one marker, one walk through nested values.

Which secrets a process knows (the keys set in its environment, the run secrets it has read) is the business of
``hermes_nb.system.secrets.redact``; this module only replaces given strings, so the processes that cannot see
that list (an atroposlib environment's, a log filter's) hide theirs the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "***"


def without_secrets(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with each of ``secrets`` replaced by ``REDACTED`` in every string, inside dicts (keys too),
    lists and tuples (which come back as lists); other values are returned as they are."""
    hidden = [secret for secret in secrets if secret]
    return _walk(value, hidden) if hidden else value


def _walk(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, secrets) for v in value]
    return value
