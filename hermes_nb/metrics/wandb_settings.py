"""What a W&B mirror is told: the run's W&B settings, the resolved mode, and where its identity is recorded.

Shared by the ``MetricsLogger`` (the parent, ``logger.py``) and the mirror process (``wandb_mirror.py``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.config import WandbConfig

ResolvedWandbMode = Literal["online", "offline", "disabled"]


class WandbRunSettings(BaseModel):
    """What ``wandb.init`` gets. ``dir`` is the run directory: W&B's own files go to ``<dir>/wandb/``."""

    model_config = ConfigDict(extra="forbid")

    project: str = WandbConfig.model_fields["project"].default
    name: str | None = None
    group: str | None = None
    mode: ResolvedWandbMode = "offline"
    dir: Path
    entity: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    # Which process of the run logs ("trainer", "env"): the W&B job type and the name of wandb_<role>.json.
    role: str = "trainer"


def resolve_wandb_mode(config_mode: str) -> ResolvedWandbMode:
    """``auto`` = online when ``WANDB_API_KEY`` is set, else offline (an explicit ``WANDB_MODE`` of offline or
    disabled in the environment wins, so tests and air-gapped machines stay off the network)."""
    if config_mode in ("online", "offline", "disabled"):
        return config_mode  # type: ignore[return-value]
    if config_mode != "auto":
        raise ValueError(f"wandb.mode: {config_mode!r} is not one of auto, online, offline, disabled")
    env_mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if env_mode in ("offline", "dryrun"):
        return "offline"
    if env_mode == "disabled":
        return "disabled"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def wandb_info_path(run_dir: str | Path, role: str) -> Path:
    """Where the W&B run's id, name and URL are recorded for status to find."""
    return Path(run_dir) / f"wandb_{role}.json"
