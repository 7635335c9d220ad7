"""Where an environment sends its inference requests: ``APIServerConfig``, shaped like atroposlib's.

An environment's own settings are ``hermes_nb.config.BaseEnvConfig`` (the run's config reads their defaults, so they
are defined there, with ``LOCKED_ENV_FIELDS``, the ones the run decides).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class APIServerConfig(BaseModel):
    """Where an environment sends inference requests (the trainer's inference server, by default)."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = "policy"
    base_url: str = "http://127.0.0.1:9001/v1"
    # Name of the environment variable holding the key, never the key itself: configs are saved to disk.
    api_key_env: str | None = None
    timeout: float = Field(default=120.0, gt=0)
    num_max_requests_at_once: int = Field(default=64, ge=1)
    num_requests_for_eval: int = Field(default=64, ge=1)
