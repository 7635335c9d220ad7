"""Environment configuration, shaped like ``atroposlib.envs.base.BaseEnvConfig`` and ``APIServerConfig``.

Fields listed in ``LOCKED_ENV_FIELDS`` are infrastructure that the run system decides (where the tokenizer and
servers are, where files go); the notebook shows them and refuses edits to them. Every other field is the
experimenter's to edit, validated by the constraints declared here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Infrastructure: filled in by the run system; shown, never edited by a user.
LOCKED_ENV_FIELDS = frozenset({"tokenizer_name", "rollout_server_url", "data_path_to_save_groups"})


class BaseEnvConfig(BaseModel):
    """Settings every environment has. Subclass it to add an environment's own fields."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    group_size: int = Field(default=16, ge=2, le=256, description="Completions sampled per prompt (one group).")
    max_num_workers: int = Field(default=8, ge=1, le=256, description="Groups collected concurrently.")
    max_eval_workers: int = Field(default=16, ge=1, le=256, description="Concurrent evaluation requests.")
    steps_per_eval: int = Field(
        default=25, ge=0, description="Evaluate every this many trainer steps (0 = never during training)."
    )
    max_token_length: int = Field(default=64, ge=8, le=32768, description="Longest sequence (prompt + completion).")
    batch_size: int = Field(default=128, ge=1, le=65536, description="Sequences per trainer step.")
    total_steps: int = Field(default=100, ge=1, le=1_000_000, description="Trainer steps in the run.")
    inference_weight: float = Field(default=1.0, gt=0, description="This environment's share of each batch.")
    max_batches_offpolicy: int = Field(
        default=3, ge=1, le=100, description="Back-pressure: stop sampling when this many batches are queued."
    )
    ensure_scores_are_not_same: bool = Field(
        default=True, description="Drop groups whose scores are all equal (they carry no learning signal)."
    )
    include_messages: bool = Field(default=False, description="Send the chat messages with each scored group.")
    use_wandb: bool = Field(default=True, description="Log environment metrics to W&B (offline without a key).")
    wandb_name: str | None = Field(default=None, description="W&B name of the environment's run.")
    seed: int = Field(default=0, ge=0, description="Seed of the item generator.")
    eval_items: int = Field(default=200, ge=1, le=100_000, description="Held-out items per evaluation.")
    temperature: float = Field(default=1.0, ge=0.0, le=10.0, description="Sampling temperature for training.")
    tokenizer_name: str = Field(default="embedded", description="Follows the base model (locked).")
    rollout_server_url: str = Field(default="http://127.0.0.1:8000", description="Trajectory API (locked).")
    data_path_to_save_groups: str | None = Field(default=None, description="Where groups are written (locked).")


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
