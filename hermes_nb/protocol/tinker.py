"""The remote side of a run on the Tinker backend, as the trainer records it and status, results and the
notebook read it back: ``tinker.json`` in the run directory (``TinkerRunInfo``) and, in each checkpoint
directory, ``tinker_checkpoint.json`` (``TinkerCheckpoint``: the ``tinker://`` paths the server keeps).

Neither ever holds the API key: the server URL is stored without credentials (``public_url``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field

from hermes_nb.protocol.run_files import TINKER_CHECKPOINT_FILE, TINKER_FILE

# What the status shows when neither ``tinker.base_url`` nor ``TINKER_BASE_URL`` is set: the SDK then picks its
# own default (the hosted service), which it does not expose as public API, so it is named rather than copied.
SDK_DEFAULT_URL = "(tinker SDK default: hosted Tinker)"


class TinkerRunInfo(BaseModel):
    """What a run trains on and how much it has done there; rewritten (atomically) after every step."""

    base_url: str
    base_model: str
    lora_rank: int
    sdk_version: str
    tokens_trained: int = 0
    tokens_sampled: int = 0
    sample_requests: int = 0
    # Calls that failed with a network error, a 5xx or a rate limit and were tried again (counted per retry).
    retries: int = 0
    rate_limited: int = 0
    last_error: str | None = None
    last_checkpoint: str | None = None
    updated_at: float = Field(default_factory=time.time)


class TinkerCheckpoint(BaseModel):
    """A checkpoint kept by the Tinker server: its state (weights + optimizer, for resume) and sampler weights."""

    state_path: str
    sampler_path: str | None = None
    base_model: str
    lora_rank: int
    base_url: str


def public_url(url: str | None) -> str:
    """``url`` without user, password or query (where a token could hide); the SDK default when unset."""
    effective = url or os.environ.get("TINKER_BASE_URL") or ""
    if not effective:
        return SDK_DEFAULT_URL
    parts = urlsplit(effective)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_run_info(run_dir: Path, info: TinkerRunInfo) -> None:
    _write_atomic(run_dir / TINKER_FILE, info.model_dump_json(indent=1))


def read_run_info(run_dir: Path) -> TinkerRunInfo | None:
    """The run's ``tinker.json``; None for a run on another backend (or one whose file is unreadable)."""
    try:
        return TinkerRunInfo.model_validate_json((run_dir / TINKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_checkpoint(directory: Path, checkpoint: TinkerCheckpoint) -> None:
    _write_atomic(directory / TINKER_CHECKPOINT_FILE, checkpoint.model_dump_json(indent=1))


def read_checkpoint(directory: Path) -> TinkerCheckpoint | None:
    """The Tinker paths of a checkpoint directory; None for a local checkpoint."""
    path = directory / TINKER_CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        return TinkerCheckpoint.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except ValueError:
        return None
