"""Models named by their Hugging Face hub id (``org/name``, ``org/name@revision``), resolved to a local snapshot.

The launcher resolves a run's model fields once, before any of its processes starts (``hub_snapshots``): each hub
id becomes the snapshot directory in the standard hub cache, downloaded there if it is missing, with
``huggingface_hub``'s progress bars (tqdm in a terminal, its widget in a notebook). The run's config records that
directory, so the trainer, the sampler, the tokenizer and the environment all read the same files and never the
network. A value that is an existing directory stays a directory; ``embedded``, run ids and absolute or ``./``
paths never have the ``org/name`` shape.

``HF_ENDPOINT``, ``HF_HUB_CACHE`` / ``HF_HOME`` and ``HF_HUB_OFFLINE`` are read at each resolution, not only when
``huggingface_hub`` was first imported: a kernel that imported transformers an hour ago still uses the cache and
endpoint set since, and an ``HF_HUB_OFFLINE`` set since keeps it to the cache (huggingface_hub reads the variables
once, at its import: one unset since then still stops its requests).

``HF_TOKEN`` comes from the environment or ``~/.hermes/.env`` (``home.load_keys``); ``huggingface_hub`` reads it
from the environment itself, so hermes-nb never holds it, passes it on a command line or writes it to a log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hermes_nb.errors import ConfigError

# The hub's repository names: letters, digits, '-', '_' and '.', one owner and one name (huggingface_hub's
# validate_repo_id); an optional '@revision' (a branch, a tag or a commit).
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^\s@]+))?$")
# What a model needs to load and to tokenize; weights in safetensors only (a repository that also has .bin or
# .onnx copies would download them for nothing).
MODEL_FILE_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
# The trainer fields that name a model a local run loads.
MODEL_FIELDS = ("base_model", "reference_model", "pretrained_model_path", "teacher_model")
_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubId:
    repo: str  # org/name
    revision: str | None  # None: the default branch

    def __str__(self) -> str:
        return self.repo if self.revision is None else f"{self.repo}@{self.revision}"


class ModelFields(Protocol):
    """The part of ``TrainerConfig`` that names models (typed here: config.py stands on a higher floor)."""

    @property
    def backend(self) -> str: ...
    @property
    def base_model(self) -> str: ...
    @property
    def reference_model(self) -> str | None: ...
    @property
    def pretrained_model_path(self) -> str | None: ...
    @property
    def teacher_model(self) -> str | None: ...


def parse_hub_id(value: str) -> HubId | None:
    """The hub id ``value`` names, or None: an existing directory, or any value without the ``org/name`` shape."""
    match = _HUB_ID.match(value)
    if match is None or Path(value).expanduser().is_dir():
        return None
    return HubId(repo=match["repo"], revision=match["revision"])


def hub_snapshots(trainer: ModelFields) -> dict[str, str]:
    """``{field: snapshot directory}`` for each model field of a local run that is a hub id, downloaded if missing.

    A Tinker run names the server's models, which have the same shape and are never downloaded here."""
    if trainer.backend != "local":
        return {}
    resolved: dict[str, str] = {}
    for field in MODEL_FIELDS:
        value = getattr(trainer, field)
        hub_id = parse_hub_id(value) if value else None
        if hub_id is not None:
            resolved[field] = str(snapshot_dir(hub_id, f"trainer.{field}"))
    return resolved


def snapshot_dir(hub_id: HubId, field: str) -> Path:
    """The local snapshot of ``hub_id``: from the cache, or downloaded into it. Refused as a ``ConfigError``
    naming ``field``, the id and what to do."""
    try:
        from huggingface_hub import errors, snapshot_download
    except ImportError:
        raise ConfigError(
            f"{field}: {str(hub_id)!r} is a hub id, and huggingface_hub is not installed: "
            "pip install 'hermes-nb[train]'"
        ) from None
    offline = _offline()
    try:
        path = snapshot_download(
            hub_id.repo,
            revision=hub_id.revision,
            cache_dir=_cache_dir(),
            endpoint=os.environ.get("HF_ENDPOINT") or None,
            local_files_only=offline,
            allow_patterns=MODEL_FILE_PATTERNS,
        )
    except errors.GatedRepoError:
        raise ConfigError(_gated(hub_id, field)) from None
    except errors.RepositoryNotFoundError:
        raise ConfigError(_not_found(hub_id, field)) from None
    except errors.RevisionNotFoundError:
        raise ConfigError(
            f"{field}: {hub_id.repo!r} has no revision {hub_id.revision!r} on the hub; name a branch, tag or commit "
            "it has, or leave out '@...' for its default branch"
        ) from None
    except errors.LocalEntryNotFoundError:
        raise ConfigError(_not_cached(hub_id, field, offline)) from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise ConfigError(f"{field}: the hub answered HTTP {status} for {str(hub_id)!r}; try again later") from None
    return Path(path)


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cache_dir() -> str | None:
    """``HF_HUB_CACHE``, else ``HF_HOME/hub``; None: huggingface_hub's own default (``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    return None


def _token_hint() -> str:
    if os.environ.get("HF_TOKEN"):
        return "the token in HF_TOKEN has no access to it"
    return "put HF_TOKEN=<your token> in ~/.hermes/.env"


def _gated(hub_id: HubId, field: str) -> str:
    return (
        f"{field}: {hub_id.repo!r} is gated on the hub: accept its terms on https://huggingface.co/{hub_id.repo} "
        f"and give a token of that account ({_token_hint()})"
    )


def _not_found(hub_id: HubId, field: str) -> str:
    return (
        f"{field}: {hub_id.repo!r} is neither a local directory nor a model on the hub: check the spelling, or for a "
        f"private model {_token_hint()}"
    )


def _not_cached(hub_id: HubId, field: str, offline: bool) -> str:
    if offline:
        return (
            f"{field}: {str(hub_id)!r} is not in the hub cache and HF_HUB_OFFLINE is set: download it once online "
            "(unset HF_HUB_OFFLINE), or name a local model directory"
        )
    return (
        f"{field}: the hub cannot be reached and {str(hub_id)!r} is not in its cache: check the connection "
        "(or HF_ENDPOINT), or name a local model directory"
    )
