"""The one model of a run's configuration: environment fields, trainer, W&B, and the locked infrastructure.

``RunConfig`` is what is saved as ``config.yaml`` in a run directory and handed to every process of the run
(``--config``). ``env`` holds the selected environment's own config fields as plain values; they are
validated against that environment's schema (read in a child process, see ``hermes_nb.schema``).
Locked fields (``LOCKED_FIELDS``) are decided by the run system and refused by edits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_nb.env.config import LOCKED_ENV_FIELDS
from hermes_nb.errors import ConfigError

EMBEDDED_BASE_MODEL = "embedded"

LossName = Literal["importance_sampling", "ppo"]
BackendName = Literal["local", "tinker"]
WandbMode = Literal["auto", "online", "offline", "disabled"]


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: BackendName = Field(default="local", description="local: torch on this machine; tinker: hosted.")
    base_model: str = Field(
        default=EMBEDDED_BASE_MODEL,
        description="'embedded' (the tiny model shipped with hermes-nb), a local model directory, or a Tinker model.",
    )
    learning_rate: float = Field(default=4e-5, gt=0, le=1.0, description="Adam learning rate.")
    lora_rank: int = Field(default=0, ge=0, le=1024, description="LoRA rank; 0 = full fine-tune (local backend).")
    loss: LossName = Field(default="importance_sampling", description="Policy-gradient loss (Tinker's names).")
    ppo_clip_epsilon: float = Field(default=0.2, gt=0, lt=1, description="Clip range of the ppo loss.")
    max_grad_norm: float = Field(default=1.0, ge=0, description="Gradient clipping (0 = off).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    save_checkpoint_interval: int = Field(
        default=25, ge=0, description="Checkpoint every this many steps (0 = only the final one)."
    )
    seed: int = Field(default=0, ge=0, description="Seed of the trainer and the sampler.")
    torch_threads: int | None = Field(default=None, ge=1, le=512, description="torch threads (None = half the cores).")
    pretrained_model_path: str | None = Field(
        default=None, description="Start from these weights: a run id, a checkpoint path or a model directory."
    )
    resume_from: str | None = Field(default=None, description="Continue this stopped or failed run (run id).")
    transfer_learning: bool = Field(default=False, description="Mix a previous run's trajectories into training.")
    replay_from: str | None = Field(default=None, description="Run id whose recorded trajectories are replayed.")
    transfer_weight: float = Field(default=0.0, ge=0, le=1, description="Fraction of each batch from the replay.")
    fine_tune_steps: int = Field(default=0, ge=0, description="Steps during which the replay is mixed in.")


class WandbConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    project: str = Field(default="hermes-nb", min_length=1, description="W&B project.")
    run_name: str | None = Field(default=None, description="W&B run name (default: <environment>-<run id>).")
    mode: WandbMode = Field(default="auto", description="auto: online with WANDB_API_KEY, else offline.")
    entity: str | None = Field(default=None, description="W&B entity (locked: follows the API key).")


class InfraConfig(BaseModel):
    """Decided by the run system when a run starts; every field is locked."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    run_dir: str | None = None
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    api_url: str | None = None
    inference_url: str | None = None
    api_port: int | None = None
    inference_port: int | None = None
    tokenizer_name: str | None = None
    # Resolved from trainer.resume_from / pretrained_model_path / replay_from by the launcher (hermes_nb.runs.transfer)
    # so that the trainer never has to interpret run ids: a checkpoint to resume (weights + optimizer + step), the
    # step it continues after, initial weights only (transfer), and the trajectories file to replay.
    resume_checkpoint: str | None = None
    start_step: int = 0
    init_weights: str | None = None
    replay_trajectories: str | None = None


class EnvironmentRef(BaseModel):
    """Which environment class a run uses: found by discovery, loaded by file path in the child processes."""

    model_config = ConfigDict(extra="forbid")

    name: str
    class_name: str
    file: str


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    environment: EnvironmentRef | None = None
    env: dict[str, Any] = Field(default_factory=dict)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    infra: InfraConfig = Field(default_factory=InfraConfig)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<text>") -> RunConfig:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: expected a mapping of sections (env, trainer, wandb), got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {format_validation_error(exc)}") from None

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return cls.from_yaml_text(path.read_text(encoding="utf-8"), source=str(path))

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader never sees half a config."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_yaml(), encoding="utf-8")
        tmp.replace(path)


# Locked = infrastructure the system decides. Dotted names, as accepted by rl_edit_config.
LOCKED_FIELDS: frozenset[str] = frozenset(
    {f"env.{name}" for name in LOCKED_ENV_FIELDS}
    | {f"infra.{name}" for name in InfraConfig.model_fields}
    | {"wandb.entity", "environment"}
)


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``field.path: message (got value)``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "config"
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        parts.append(f"{where}: {error['msg']}{shown}")
    return "; ".join(parts)
