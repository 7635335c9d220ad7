"""The training loop: pull a batch, compute advantages, one optimizer step, log, checkpoint, publish weights.

Every piece is a top-level function so tests drive the real code. ``run_training`` owns the step loop and
returns why it ended; the process wiring (server, signals, exit codes) is in ``hermes_nb.trainer.main``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_nb.config import RunConfig, TrainerConfig, base_model_dir
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import CheckpointKind
from hermes_nb.protocol.trajectory import Registration, ScoredDataGroup
from hermes_nb.trainer.advantages import group_data, has_signal
from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.checkpoints import checkpoint_root, record_batch, save_checkpoint
from hermes_nb.trainer.types import AdamParams, Datum, LossConfig, SamplerHandle

logger = logging.getLogger(__name__)


class MetricsSink(Protocol):
    def log(self, step: int, values: dict[str, float]) -> Any: ...


class BatchSource(Protocol):
    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None: ...


@runtime_checkable
class ReportingSource(Protocol):
    """A batch source with metrics about the batch it handed out last (e.g. the replay's share)."""

    def batch_metrics(self) -> dict[str, float]: ...


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


def batch_score_metrics(batch: list[ScoredDataGroup]) -> dict[str, float]:
    """Of the trained batch (``train/*``, the trainer's alone): reward mean over its sequences, and percent correct =
    the share of them the environment judged correct (``ScoredDataGroup.verdicts``)."""
    scores = [s for group in batch for s in group.scores]
    correct = [v for group in batch for v in group.verdicts()]
    return {
        keys.TRAIN_REWARD_MEAN: sum(scores) / len(scores),
        keys.TRAIN_PERCENT_CORRECT: sum(correct) / len(correct),
    }


def prepare_data(backend: TrainingBackend, batch: list[ScoredDataGroup]) -> list[Datum]:
    """Datums that carry a learning signal; missing sampling logprobs come from the current policy (on-policy,
    so the importance ratio starts at 1)."""
    data: list[Datum] = []
    missing: list[int] = []
    for group in batch:
        group_datums, has_logprobs = group_data(group)
        for datum, sent in zip(group_datums, has_logprobs, strict=True):
            if not has_signal(datum):
                continue  # zero advantage everywhere: no gradient under either loss, only compute
            if not sent:
                missing.append(len(data))
            data.append(datum)
    if missing:
        current = backend.forward([data[i] for i in missing])
        for i, logprobs in zip(missing, current, strict=True):
            data[i] = data[i].model_copy(update={"sampling_logprobs_T": logprobs})
    return data


# cispo's cap of the importance weight when trainer.epsilon_high is unset (ScaleRL's recommendation).
CISPO_DEFAULT_CAP = 5.0


def loss_config_for(trainer: TrainerConfig, max_completion_length: int) -> LossConfig:
    """The loss settings of ``trainer`` (``max_completion_length``: the run's max_token_length, dr_grpo's constant)."""
    high = trainer.epsilon_high
    if high is None:
        high = CISPO_DEFAULT_CAP if trainer.loss == "cispo" else trainer.epsilon
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


def adam_params(trainer: TrainerConfig) -> AdamParams:
    return AdamParams(
        learning_rate=trainer.learning_rate, weight_decay=trainer.weight_decay, max_grad_norm=trainer.max_grad_norm
    )


def train_step(
    backend: TrainingBackend, batch: list[ScoredDataGroup], trainer: TrainerConfig, max_completion_length: int = 1
) -> dict[str, float]:
    """One optimizer step on ``batch``; returns the step's training metrics (no throughput)."""
    values = batch_score_metrics(batch)
    values[keys.TRAIN_LEARNING_RATE] = trainer.learning_rate
    data = prepare_data(backend, batch)
    values[keys.TRAIN_TRAINED_SEQUENCES] = float(len(data))
    if not data:
        # Every group had equal scores: nothing to learn from, and an Adam step on zero gradients would still
        # move the weights (momentum), so skip it.
        values[keys.TRAIN_LOSS] = 0.0
        return values
    output = backend.forward_backward(data, trainer.loss, loss_config_for(trainer, max_completion_length))
    step = backend.optim_step(adam_params(trainer))
    values[keys.TRAIN_LOSS] = output.loss
    values[keys.TRAIN_TRAINED_TOKENS] = float(output.num_trained_tokens)
    values.update({keys.train_key(k): v for k, v in output.metrics.items()})
    values.update({keys.train_key(k): v for k, v in step.metrics.items() if k != "learning_rate"})
    return values


def throughput(batch: list[ScoredDataGroup], step_seconds: float) -> dict[str, float]:
    sequences = sum(len(g.tokens) for g in batch)
    tokens = sum(len(t) for g in batch for t in g.tokens)
    seconds = max(step_seconds, 1e-9)
    return {
        keys.TRAIN_STEP_SECONDS: step_seconds,
        keys.TRAIN_SEQUENCES_PER_SECOND: sequences / seconds,
        keys.TRAIN_TOKENS_PER_SECOND: tokens / seconds,
    }


def checkpoint_kind(step: int, settings: LoopSettings) -> CheckpointKind | None:
    if step >= settings.total_steps:
        return "final"
    interval = settings.trainer.save_checkpoint_interval
    return "interval" if interval > 0 and step % interval == 0 else None


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
) -> LoopOutcome:
    """Train from ``start_step`` to ``settings.total_steps``; a set ``stop`` ends it after the current step
    with a ``stop`` checkpoint. Steps are 1-based: the first completed step is 1."""
    step = saved = start_step
    last_end = time.perf_counter()
    while step < settings.total_steps:
        batch = source.next_batch(stop)
        if batch is None:
            break
        started = time.perf_counter()
        values = train_step(backend, batch, settings.trainer, settings.max_token_len)
        if isinstance(source, ReportingSource):
            values.update(source.batch_metrics())
        step += 1
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
        kind = checkpoint_kind(step, settings)
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
