"""The training loop: pull a batch, compute advantages, optimizer steps, log, checkpoint, publish weights.

Every piece is a top-level function so tests drive the real code. ``run_training`` owns the step loop and
returns why it ended; the process wiring (server, signals, exit codes) is in ``hermes_nb.trainer.run.main``. Around
it: where batches come from (``sources``), a batch into datums (``preparation``), the loss and Adam settings
(``loss_settings``), a batch's own figures (``step_metrics``), the API registration (``registration``).

A step (``train_step``): advantages by ``trainer.scale_rewards``; the datums prepared
(``hermes_nb.trainer.step.preparation``: truncated completions out of the loss with
``trainer.mask_truncated_completions``; the trainer's own logprobs before the first pass into
``Datum.old_logprobs_T`` with ``trainer.importance_sampling_cap``, the reference policy's into
``Datum.reference_logprobs_T`` with ``trainer.beta > 0``); the teacher's term in the advantages with
``trainer.teacher_model`` (``hermes_nb.trainer.step.distillation``); then ``trainer.num_iterations`` passes of
``forward_backward`` + ``optim_step`` on the same data, so the ratio's denominator is the sampling logprobs (or
``old_logprobs_T``) on every pass, at the step's learning rate (``hermes_nb.trainer.step.schedule``). The loss and the
backend's diagnostics (clip fractions, KL, entropy) are the last pass's; ``train/optimizer_steps`` counts the
passes of the whole run (a resumed run counts ``num_iterations`` for each step before it, as it cannot know which
of them had nothing to learn from).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import CheckpointKind
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.batches.sources import BatchSource, ReportingSource, SteppingSource
from hermes_nb.trainer.run.checkpoints import record_batch, save_checkpoint
from hermes_nb.trainer.step.advantages import with_batch_advantages
from hermes_nb.trainer.step.distillation import with_teacher
from hermes_nb.trainer.step.loss_settings import adam_params, loss_config_for
from hermes_nb.trainer.step.preparation import prepare_data
from hermes_nb.trainer.step.schedule import learning_rate_at
from hermes_nb.trainer.step.step_metrics import batch_score_metrics, batch_shape_metrics, throughput
from hermes_nb.trainer.types import SamplerHandle

logger = logging.getLogger(__name__)


# What run_training writes to besides the backend: its metrics rows, and (Publisher) the weights after each step.
class MetricsSink(Protocol):
    def log(self, step: int, values: dict[str, float]) -> Any: ...


# Called after every optimizer step with the new weights and the step that produced them.
Publisher = Callable[[SamplerHandle, int], None]


@dataclass(frozen=True)
class LoopSettings:
    """The loop's view of the run config (``env`` holds plain values; a missing one is ``BaseEnvConfig``'s default)."""

    batch_size: int
    total_steps: int
    max_token_len: int
    run_dir: Path
    trainer: TrainerConfig

    @classmethod
    def from_config(cls, config: RunConfig, run_dir: Path) -> LoopSettings:
        return cls(
            batch_size=int(config.env_value("batch_size")),
            total_steps=int(config.env_value("total_steps")),
            max_token_len=int(config.env_value("max_token_length")),
            run_dir=run_dir,
            trainer=config.trainer,
        )


@dataclass(frozen=True)
class LoopOutcome:
    reason: Literal["completed", "stopped"]
    last_step: int


def train_step(
    backend: TrainingBackend,
    batch: list[ScoredDataGroup],
    trainer: TrainerConfig,
    max_token_len: int | None = None,
    *,
    learning_rate: float | None = None,
    optimizer_steps: int = 0,
) -> dict[str, float]:
    """``trainer.num_iterations`` optimizer steps on ``batch`` (none when nothing in it carries signal); returns
    the step's training metrics (no throughput). ``max_token_len``: the run's (truncation, dr_grpo's constant);
    ``optimizer_steps``: those taken before, counted on in ``train/optimizer_steps``."""
    batch = with_batch_advantages(batch, trainer.scale_rewards)
    values = batch_score_metrics(batch)
    values.update(batch_shape_metrics(batch, max_token_len))
    adam = adam_params(trainer, learning_rate)
    values[keys.TRAIN_LEARNING_RATE] = adam.learning_rate
    values[keys.TRAIN_OPTIMIZER_STEPS] = float(optimizer_steps)
    data = prepare_data(backend, batch, trainer, max_token_len)
    if trainer.teacher_model is not None and data:
        distilled = with_teacher(backend, data, trainer.teacher_kl_coef)
        data, values[keys.TRAIN_TEACHER_KL] = distilled.data, distilled.teacher_kl
    values[keys.TRAIN_TRAINED_SEQUENCES] = float(len(data))
    if not data:
        # Every group had equal scores: nothing to learn from, and an Adam step on zero gradients would still
        # move the weights (momentum), so skip it.
        values[keys.TRAIN_LOSS] = 0.0
        return values
    longest = max_token_len or max(len(d.input_tokens_T) + 1 for d in data)
    loss_config = loss_config_for(trainer, longest)
    for _ in range(trainer.num_iterations):
        output = backend.forward_backward(data, trainer.loss, loss_config)
        step = backend.optim_step(adam)
    values[keys.TRAIN_OPTIMIZER_STEPS] += trainer.num_iterations
    values[keys.TRAIN_LOSS] = output.loss
    values[keys.TRAIN_TRAINED_TOKENS] = float(output.num_trained_tokens)
    values.update({keys.train_key(k): v for k, v in output.metrics.items()})
    values.update({keys.train_key(k): v for k, v in step.metrics.items() if k != "learning_rate"})
    return values


def checkpoint_kind(step: int, settings: LoopSettings, previous: int | None = None) -> CheckpointKind | None:
    """The checkpoint due after the step that took the run from ``previous`` (default ``step - 1``) to ``step``:
    an interval one when a multiple of ``save_checkpoint_interval`` lies in between (a dynamically sampled step
    can stand for several)."""
    if step >= settings.total_steps:
        return "final"
    interval = settings.trainer.save_checkpoint_interval
    since = step - 1 if previous is None else previous
    return "interval" if interval > 0 and step // interval > since // interval else None


def run_training(
    backend: TrainingBackend,
    source: BatchSource,
    settings: LoopSettings,
    config: RunConfig,
    *,
    stop: threading.Event,
    metrics: MetricsSink,
    publish: Publisher | None = None,
    start_step: int = 0,
    pause_sampling: Callable[[], None] | None = None,
) -> LoopOutcome:
    """Train from ``start_step`` to ``settings.total_steps``; a set ``stop`` ends it after the current step
    with a ``stop`` checkpoint. Steps are 1-based: the first completed step is 1. ``pause_sampling`` is called
    once a batch is in hand, before the step computes (vLLM's sleep mode); ``publish`` resumes sampling."""
    trainer = settings.trainer
    step = saved = start_step
    optimizer_steps = start_step * trainer.num_iterations
    last_end = time.perf_counter()
    while step < settings.total_steps:
        batch = source.next_batch(stop)
        if batch is None:
            break
        started = time.perf_counter()
        if pause_sampling is not None:
            pause_sampling()
        previous = step
        step += source.batches_taken() if isinstance(source, SteppingSource) else 1
        batch = with_batch_advantages(batch, trainer.scale_rewards)
        values = train_step(
            backend,
            batch,
            trainer,
            settings.max_token_len,
            learning_rate=learning_rate_at(trainer, step, settings.total_steps),
            optimizer_steps=optimizer_steps,
        )
        optimizer_steps = int(values[keys.TRAIN_OPTIMIZER_STEPS])
        if isinstance(source, ReportingSource):
            values.update(source.batch_metrics())
        record_batch(settings.run_dir, step, batch)
        if publish is not None:
            publish(backend.save_weights_for_sampler(f"step_{step}"), step)
        now = time.perf_counter()
        values.update(throughput(batch, now - last_end))
        values[keys.TRAIN_WAIT_SECONDS] = started - last_end
        values[keys.TRAIN_COMPUTE_SECONDS] = now - started
        last_end = now
        metrics.log(step, values)
        logger.info(
            "step %d/%d loss %.4f reward %.3f correct %.3f (%.2f s)",
            step,
            settings.total_steps,
            values[keys.TRAIN_LOSS],
            values[keys.TRAIN_REWARD_MEAN],
            values[keys.TRAIN_PERCENT_CORRECT],
            values[keys.TRAIN_STEP_SECONDS],
        )
        kind = checkpoint_kind(step, settings, previous)
        if kind is not None:
            save_checkpoint(backend, config, settings.run_dir, step, kind, _scalar_summary(values))
            saved = step
        if stop.is_set() and step < settings.total_steps:
            break
    if step >= settings.total_steps:
        return LoopOutcome("completed", step)
    if step > saved:
        save_checkpoint(backend, config, settings.run_dir, step, "stop")
    return LoopOutcome("stopped", step)


def _scalar_summary(values: dict[str, float]) -> dict[str, float]:
    wanted = (keys.TRAIN_LOSS, keys.TRAIN_REWARD_MEAN, keys.TRAIN_PERCENT_CORRECT)
    return {k: values[k] for k in wanted if k in values}
