"""Run ids: sortable by creation time, unguessable, and safe as a file name on every platform."""

from __future__ import annotations

import re
import secrets
import time

# 10 characters of a 32-letter alphabet = 50 bits: not guessable, still short enough to type.
_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
_RANDOM_CHARS = 10
RUN_ID_PATTERN = re.compile(r"^\d{8}-\d{6}-[a-z0-9]{10}$")


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_CHARS))
    return f"{stamp}-{suffix}"


def looks_like_run_id(text: str) -> bool:
    return bool(RUN_ID_PATTERN.match(text))
