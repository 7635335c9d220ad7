"""What the trainer tells the trajectory API when it registers: the run's batch shape, steps, checkpoints and the
model's vocabulary (``Registration``)."""

from __future__ import annotations

import json

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.protocol.trajectory import Registration
from hermes_nb.trainer.run.checkpoints import checkpoint_root
from hermes_nb.trainer.run.loop import LoopSettings


def registration_for(settings: LoopSettings, config: RunConfig, start_step: int) -> Registration:
    return Registration(
        wandb_group=config.wandb.run_name or "",
        wandb_project=config.wandb.project,
        batch_size=settings.batch_size,
        max_token_len=settings.max_token_len,
        checkpoint_dir=str(checkpoint_root(config, settings.run_dir)),
        save_checkpoint_interval=settings.trainer.save_checkpoint_interval,
        starting_step=start_step,
        num_steps=settings.total_steps,
        vocab_size=model_vocab_size(config),
    )


def model_vocab_size(config: RunConfig) -> int | None:
    """The token-embedding rows of the local backend's model (``vocab_size`` in its ``config.json``), sent with
    the registration so that the API refuses token ids the trainer could not look up; ``None`` when unknown."""
    if config.trainer.backend != "local":
        return None
    try:
        declared = json.loads((base_model_dir(config.trainer.base_model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(declared, dict):
        return None
    value = declared.get("vocab_size") or (declared.get("text_config") or {}).get("vocab_size")
    return value if isinstance(value, int) and value > 0 else None
