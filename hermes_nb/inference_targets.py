"""What ``rl_test_inference(models=...)`` accepts, resolved before anything starts.

A reference is one of: ``"embedded"`` (the shipped base model), a run id (its final checkpoint), ``"<run id>@best"``,
a checkpoint or model directory, or an OpenAI-compatible endpoint ``http(s)://host/v1`` with an optional
``#model-name``. No reference means the run's base model (``trainer.base_model``).

An endpoint's key is read by the environment process from an environment variable whose NAME is passed on:
``HERMES_NB_TEST_API_KEY_ENV`` names it when set; OpenRouter URLs use ``OPENROUTER_API_KEY``. The key itself
never appears in an argument, a log or a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from hermes_nb import home
from hermes_nb.config import EMBEDDED_BASE_MODEL, RunConfig
from hermes_nb.errors import HermesNBError, TransferError

# Names the environment variable that holds an endpoint's key (for endpoints other than OpenRouter).
KEY_ENV_VAR = "HERMES_NB_TEST_API_KEY_ENV"
OPENROUTER_HOST = "openrouter.ai"
OPENROUTER_KEY = "OPENROUTER_API_KEY"
ACCEPTED = (
    "a run id, '<run id>@best', a checkpoint or model directory, 'embedded', "
    "or an endpoint 'http(s)://host/v1[#model-name]'"
)


class ModelReferenceError(HermesNBError):
    """A ``models`` entry names nothing usable."""


class ModelTarget(BaseModel):
    """One model to test: a local directory (served by a temporary server) or a remote endpoint."""

    model_config = ConfigDict(frozen=True)

    reference: str  # as the caller wrote it
    kind: Literal["local", "endpoint"]
    location: str  # the model directory, or the endpoint's base URL without the #fragment
    model_name: str | None = None  # sent as "model" to an endpoint
    api_key_env: str | None = None  # name of the variable holding the endpoint's key


def resolve_targets(models: str | list[str] | None, config: RunConfig) -> list[ModelTarget]:
    """``models`` as targets, in order; the run's base model when none is given."""
    references = [models] if isinstance(models, str) else list(models or [])
    if not references:
        return [_base_model_target(config)]
    targets = [resolve_target(reference) for reference in references]
    seen: set[str] = set()
    for target in targets:
        if target.reference in seen:
            raise ModelReferenceError(f"models: {target.reference!r} is listed twice; list each model once")
        seen.add(target.reference)
    return targets


def _base_model_target(config: RunConfig) -> ModelTarget:
    base = config.trainer.base_model
    path = home.embedded_base_model_dir() if base == EMBEDDED_BASE_MODEL else Path(base).expanduser()
    return _model_dir_target(base, path, "trainer.base_model")


def _model_dir_target(reference: str, path: Path, field: str) -> ModelTarget:
    if not (path / "config.json").is_file():
        raise ModelReferenceError(
            f"{field}: {reference!r} is not a local model directory (no config.json at {path}); "
            f"pass models=[...] with {ACCEPTED}"
        )
    return ModelTarget(reference=reference, kind="local", location=str(path))


def resolve_target(reference: str) -> ModelTarget:
    reference = reference.strip()
    if not reference:
        raise ModelReferenceError(f"models: an entry is empty; use {ACCEPTED}")
    if reference.startswith(("http://", "https://")):
        return _endpoint_target(reference)
    if reference == EMBEDDED_BASE_MODEL:
        return _model_dir_target(reference, home.embedded_base_model_dir(), "models")
    from hermes_nb.runs.transfer import weights_path

    try:
        path = weights_path(reference)
    except TransferError as exc:
        reason = str(exc).removeprefix("trainer.pretrained_model_path: ")
        raise ModelReferenceError(f"models: {reason}") from None
    return ModelTarget(reference=reference, kind="local", location=str(path))


def _endpoint_target(reference: str) -> ModelTarget:
    url, _, model_name = reference.partition("#")
    if not urlsplit(url).hostname:
        raise ModelReferenceError(f"models: {reference!r} has no host; use {ACCEPTED}")
    return ModelTarget(
        reference=reference,
        kind="endpoint",
        location=url.rstrip("/"),
        model_name=model_name or None,
        api_key_env=key_variable(url),
    )


def key_variable(url: str) -> str | None:
    """The NAME of the environment variable holding ``url``'s key, or None for an endpoint without one."""
    configured = os.environ.get(KEY_ENV_VAR)
    if configured:
        return configured
    host = urlsplit(url).hostname or ""
    if host == OPENROUTER_HOST or host.endswith("." + OPENROUTER_HOST):
        return OPENROUTER_KEY
    return None
