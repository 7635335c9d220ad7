"""The learning rate of each step: ``trainer.lr_scheduler_type`` with ``trainer.warmup_steps``, over the run's steps.

The values are ``transformers.get_scheduler``'s (``constant_with_warmup``, ``linear``, ``cosine``), taken the way
its Trainer takes them: the optimizer step of training step ``s`` (1-based) uses the multiplier after ``s - 1``
scheduler steps. So with warmup the first step's rate is 0 (Adam's moments move, the weights do not), and a linear
or cosine schedule ends one step short of 0. The rate is a function of the step alone: a resumed run continues its
schedule where the stopped one was. Every one of a step's ``num_iterations`` passes uses that step's rate.
"""

from __future__ import annotations

import math

from hermes_nb.config import TrainerConfig


def lr_multiplier(kind: str, done: int, warmup: int, total: int) -> float:
    """The multiplier of the base rate after ``done`` scheduler steps of ``total``."""
    if done < warmup:
        return done / max(1, warmup)
    if kind == "constant":
        return 1.0
    if kind == "linear":
        return max(0.0, (total - done) / max(1, total - warmup))
    progress = (done - warmup) / max(1, total - warmup)
    # cosine: half a period from 1 to 0 (get_cosine_schedule_with_warmup's num_cycles = 0.5)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def learning_rate_at(trainer: TrainerConfig, step: int, total_steps: int) -> float:
    """The rate of training step ``step`` (1-based) of a run of ``total_steps``."""
    multiplier = lr_multiplier(trainer.lr_scheduler_type, step - 1, trainer.warmup_steps, total_steps)
    return trainer.learning_rate * multiplier
