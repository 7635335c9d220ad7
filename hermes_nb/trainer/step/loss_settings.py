"""The settings a step hands the backend, from the run's trainer config: the loss's (``LossConfig``: the
objective's clip range, with its default from ``hermes_nb.objectives`` when ``trainer.epsilon_high`` is unset, the
aggregation, the ratio's level, the KL, truncated importance sampling) and Adam's."""

from __future__ import annotations

from hermes_nb.config import TrainerConfig
from hermes_nb.objectives import objective
from hermes_nb.trainer.types import AdamParams, LossConfig


def loss_config_for(trainer: TrainerConfig, max_completion_length: int) -> LossConfig:
    """The loss settings of ``trainer`` (``max_completion_length``: the run's max_token_length, dr_grpo's constant)."""
    high = trainer.epsilon_high
    if high is None:
        high = objective(trainer.loss).default_epsilon_high
    if high is None:
        high = trainer.epsilon
    return LossConfig(
        clip_epsilon_low=trainer.epsilon,
        clip_epsilon_high=high,
        loss_type=trainer.loss_type,
        importance_sampling_level=trainer.importance_sampling_level,
        beta=trainer.beta,
        kl_estimator=trainer.kl_estimator,
        importance_sampling_cap=trainer.importance_sampling_cap,
        max_completion_length=max_completion_length,
    )


def adam_params(trainer: TrainerConfig, learning_rate: float | None = None) -> AdamParams:
    """The step's Adam settings; ``learning_rate``: the schedule's rate of the step (None: ``trainer``'s)."""
    return AdamParams(
        learning_rate=trainer.learning_rate if learning_rate is None else learning_rate,
        weight_decay=trainer.weight_decay,
        max_grad_norm=trainer.max_grad_norm,
    )
