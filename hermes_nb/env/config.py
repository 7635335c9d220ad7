"""Environment configuration, shaped like ``atroposlib.envs.base.BaseEnvConfig`` and ``APIServerConfig``.

Fields listed in ``LOCKED_ENV_FIELDS`` are infrastructure that the run system decides (where the tokenizer and
servers are, where files go); the notebook shows them and refuses edits to them. Every other field is the
experimenter's to edit, validated by the constraints declared on ``BaseEnvConfig``.

``BaseEnvConfig`` and ``LOCKED_ENV_FIELDS`` are defined in ``hermes_nb.config`` (the run's config reads their
defaults and must not import the environment package) and re-exported here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.config import LOCKED_ENV_FIELDS, BaseEnvConfig

__all__ = ["LOCKED_ENV_FIELDS", "APIServerConfig", "BaseEnvConfig"]


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
