"""The hosted models ``rl_test_inference`` tests by default, and how it talks to their provider.

With the provider's key available (``OPENROUTER_API_KEY`` in the environment, ``<home>/.env`` or
``~/.hermes/.env``) and no ``models`` given, a small, a medium and a large hosted model are tested beside the
run's base model: the tiny shipped model cannot answer most real tasks, so a capable model is the only way to see
that prompts, parsing and scoring work, and how hard the task is. The defaults below are overridden by
``<home>/hosted_models.yaml`` (any subset of the fields, e.g. ``large: anthropic/claude-sonnet-4``), which is also
where a test points ``base_url`` at a local server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_nb.config import format_validation_error
from hermes_nb.errors import ConfigError
from hermes_nb.system import home

HOSTED_MODELS_FILE = "hosted_models.yaml"
Scale = Literal["small", "medium", "large"]
SCALES: tuple[Scale, ...] = ("small", "medium", "large")


class HostedModelsConfig(BaseModel):
    """Provider, default models and request policy for hosted endpoints (``<home>/hosted_models.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(default="https://openrouter.ai/api/v1", description="The provider's OpenAI-compatible URL.")
    api_key_env: str = Field(default="OPENROUTER_API_KEY", description="Variable that holds the provider's key.")
    # Cheap, capable models of three sizes: the test shows how hard the task is at each size, for cents.
    small: str = Field(default="qwen/qwen3-8b", min_length=1)
    medium: str = Field(default="z-ai/glm-4.7-flash", min_length=1)
    large: str = Field(default="minimax/minimax-m2.7", min_length=1)
    chat_only: list[str] = Field(
        default_factory=list,
        description="Models known to serve only /chat/completions (others are found out from a 404/400).",
    )
    request_timeout_s: float = Field(default=120.0, gt=0, description="One request's limit.")
    max_attempts: int = Field(default=3, ge=1, le=10, description="Tries of a request after a timeout or a 5xx.")
    max_retry_after_s: float = Field(default=60.0, ge=0, description="Longest Retry-After wait honoured.")
    max_concurrent_requests: int = Field(default=8, ge=1, le=256, description="Requests in flight per model.")
    # An environment counts max_tokens in the run's tokenizer, sized for its own tiny answers; a hosted model's
    # tokenizer differs and a reasoning model spends tokens before answering, so ask for at least this many.
    min_max_tokens: int = Field(default=512, ge=1, le=32768)

    def model(self, scale: Scale) -> str:
        return {"small": self.small, "medium": self.medium, "large": self.large}[scale]

    def key_available(self) -> bool:
        return bool(os.environ.get(self.api_key_env))


def config_path() -> Path:
    return home.home_dir() / HOSTED_MODELS_FILE


def load_hosted_config() -> HostedModelsConfig:
    """The defaults, overridden by ``<home>/hosted_models.yaml`` when it exists."""
    path = config_path()
    if not path.is_file():
        return HostedModelsConfig()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields (small, medium, large, base_url, ...)")
    try:
        return HostedModelsConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc)}") from None


def how_to_add_hosted_models(config: HostedModelsConfig) -> str:
    """The note a result carries when no key was found, so only the base model was tested."""
    models = ", ".join(config.model(scale) for scale in SCALES)
    return (
        f"only the base model was tested: no {config.api_key_env} found. Set it in the environment or in "
        f"~/.hermes/.env to also test {models} (change them in {config_path()}), "
        "or pass models=[...] (endpoints 'http(s)://host/v1#model', run ids, directories)"
    )
