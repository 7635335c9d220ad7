"""What ``rl_test_inference(models=...)`` accepts, resolved before anything starts.

A reference is one of: ``"embedded"`` (the shipped base model), a run id (its final checkpoint), ``"<run id>@best"``,
a checkpoint or model directory, an OpenAI-compatible endpoint ``http(s)://host/v1`` with an optional
``#model-name``, or a hosted model id ``org/model`` (at the provider of ``hosted_models.yaml``, OpenRouter by
default; only when no such directory exists). No reference means the run's base model (``trainer.base_model``),
after a small, a medium and a large hosted model when the provider's key is available (``hermes_nb.model_test.hosted``).

An endpoint's key is read from an environment variable whose NAME a target carries: ``HERMES_NB_TEST_API_KEY_ENV``
names it when set; OpenRouter URLs and hosted ids use the provider's (``OPENROUTER_API_KEY``). Only the
model-test gateway in the calling process reads it; it never appears in an argument, a log or a file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from hermes_nb.config import RunConfig, base_model_dir, embedded_model_dir
from hermes_nb.errors import HermesNBError, TransferError
from hermes_nb.model_test.hosted import SCALES, HostedModelsConfig

# Names the environment variable that holds an endpoint's key (for endpoints other than OpenRouter).
KEY_ENV_VAR = "HERMES_NB_TEST_API_KEY_ENV"
OPENROUTER_HOST = "openrouter.ai"
OPENROUTER_KEY = "OPENROUTER_API_KEY"
ACCEPTED = (
    "a run id, '<run id>@best', a checkpoint or model directory, 'embedded', 'embedded-chat', "
    "an endpoint 'http(s)://host/v1[#model-name]' or a hosted model id 'org/model'"
)
# A hosted model id as OpenRouter writes them: "qwen/qwen3-8b", "openai/gpt-4o-mini:free".
HOSTED_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.:-]+")
Scale = Literal["small", "medium", "large", "base"]


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
    scale: Scale | None = None  # set for the default model set
    chat_only: bool = False  # configured as serving /chat/completions only (hosted_models.yaml chat_only)


def split_models(text: str | None) -> list[str] | None:
    """A comma-separated list of references as a magic or the CLI takes it; ``None`` when it names none."""
    models = [m.strip() for m in text.split(",") if m.strip()] if text else []
    return models or None


def resolve_targets(
    models: str | list[str] | None, config: RunConfig, hosted: HostedModelsConfig | None = None
) -> list[ModelTarget]:
    """``models`` as targets, in order; none given: the default model set (``default_targets``)."""
    hosted = hosted or HostedModelsConfig()
    references = [models] if isinstance(models, str) else list(models or [])
    if not references:
        return default_targets(config, hosted)
    targets = [resolve_target(reference, hosted) for reference in references]
    seen: set[str] = set()
    for target in targets:
        if target.reference in seen:
            raise ModelReferenceError(f"models: {target.reference!r} is listed twice; list each model once")
        seen.add(target.reference)
    return targets


def default_targets(config: RunConfig, hosted: HostedModelsConfig) -> list[ModelTarget]:
    """A small, a medium and a large hosted model when the provider's key is set, then the run's base model."""
    base = _base_model_target(config).model_copy(update={"scale": "base"})
    if not hosted.key_available():
        return [base]
    sized = [_hosted_target(hosted.model(scale), hosted).model_copy(update={"scale": scale}) for scale in SCALES]
    return [*sized, base]


def _base_model_target(config: RunConfig) -> ModelTarget:
    base = config.trainer.base_model
    return _model_dir_target(base, base_model_dir(base), "trainer.base_model")


def _hosted_target(model_id: str, hosted: HostedModelsConfig) -> ModelTarget:
    """``model_id`` at the configured provider, with the provider's key variable."""
    return ModelTarget(
        reference=model_id,
        kind="endpoint",
        location=hosted.base_url.rstrip("/"),
        model_name=model_id,
        api_key_env=hosted.api_key_env,
        chat_only=model_id in hosted.chat_only,
    )


def _model_dir_target(reference: str, path: Path, field: str) -> ModelTarget:
    if not (path / "config.json").is_file():
        raise ModelReferenceError(
            f"{field}: {reference!r} is not a local model directory (no config.json at {path}); "
            f"pass models=[...] with {ACCEPTED}"
        )
    return ModelTarget(reference=reference, kind="local", location=str(path))


def resolve_target(reference: str, hosted: HostedModelsConfig | None = None) -> ModelTarget:
    hosted = hosted or HostedModelsConfig()
    reference = reference.strip()
    if not reference:
        raise ModelReferenceError(f"models: an entry is empty; use {ACCEPTED}")
    if reference.startswith(("http://", "https://")):
        return _endpoint_target(reference, hosted)
    if (shipped := embedded_model_dir(reference)) is not None:
        return _model_dir_target(reference, shipped, "models")
    from hermes_nb.runs.transfer.resolve import weights_path

    try:
        path = weights_path(reference)
    except TransferError as exc:
        if HOSTED_ID.fullmatch(reference) and not Path(reference).expanduser().exists():
            return _hosted_target(reference, hosted)
        reason = str(exc).removeprefix("trainer.pretrained_model_path: ")
        raise ModelReferenceError(f"models: {reason}") from None
    return ModelTarget(reference=reference, kind="local", location=str(path))


def _endpoint_target(reference: str, hosted: HostedModelsConfig) -> ModelTarget:
    url, _, model_name = reference.partition("#")
    if not urlsplit(url).hostname:
        raise ModelReferenceError(f"models: {reference!r} has no host; use {ACCEPTED}")
    return ModelTarget(
        reference=reference,
        kind="endpoint",
        location=url.rstrip("/"),
        model_name=model_name or None,
        api_key_env=key_variable(url),
        chat_only=bool(model_name) and model_name in hosted.chat_only,
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
