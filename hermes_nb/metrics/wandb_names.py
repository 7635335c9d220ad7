"""The W&B names of a run, computed in one place so the trainer, the environment and status agree."""

from __future__ import annotations

from hermes_nb.config import RunConfig


def wandb_run_name(config: RunConfig, run_id: str) -> str:
    if config.wandb.run_name:
        return config.wandb.run_name
    env_name = config.environment.name if config.environment else "run"
    return f"{env_name}-{run_id}"


def env_wandb_run_name(trainer_run_name: str) -> str:
    return f"{trainer_run_name}-env"
