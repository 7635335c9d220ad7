"""The training loop: pull a batch, compute advantages, optimizer steps, log, checkpoint, publish weights.

Every piece is a top-level function so tests drive the real code. ``run_training`` owns the step loop and
returns why it ended; the process wiring (server, signals, exit codes) is in ``hermes_nb.trainer.main``.

A step (``train_step``): advantages by ``trainer.scale_rewards``; truncated completions out of the loss with
``trainer.mask_truncated_completions``; the trainer's own logprobs before the first pass into
``Datum.old_logprobs_T`` with ``trainer.importance_sampling_cap``, the reference policy's into
``Datum.reference_logprobs_T`` with ``trainer.beta > 0``; then ``trainer.num_iterations`` passes of
``forward_backward`` + ``optim_step`` on the same data, so the ratio's denominator is the sampling logprobs (or
``old_logprobs_T``) on every pass, at the step's learning rate (``hermes_nb.trainer.schedule``). The loss and the
backend's diagnostics (clip fractions, KL, entropy) are the last pass's; ``train/optimizer_steps`` counts the
passes of the whole run (a resumed run counts ``num_iterations`` for each step before it, as it cannot know which
of them had nothing to learn from).
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
from hermes_nb.protocol.trajectory import MASK_IGNORE, Registration, ScoredDataGroup
from hermes_nb.trainer.advantages import group_data, has_signal, population_std, with_batch_advantages
from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.checkpoints import checkpoint_root, record_batch, save_checkpoint
from hermes_nb.trainer.schedule import learning_rate_at
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


@runtime_checkable
class SteppingSource(Protocol):
    """A batch source whose batch can stand for several of the run's steps (dynamic sampling's extra pulls)."""

    def batches_taken(self) -> int: ...


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


def completion_lengths(batch: list[ScoredDataGroup]) -> list[int]:
    """Completion tokens of each sequence of ``batch``: the trained ones (mask not ``MASK_IGNORE``)."""
    return [sum(1 for m in mask if m != MASK_IGNORE) for group in batch for mask in group.masks]


def batch_shape_metrics(batch: list[ScoredDataGroup], max_token_len: int | None) -> dict[str, float]:
    """What people watch while comparing algorithms, of the batch as it came: the spread of its scores
    (population std), completion lengths in tokens, and the share of completions cut off before they ended."""
    lengths = completion_lengths(batch)
    values = {
        keys.TRAIN_REWARD_STD: population_std([s for group in batch for s in group.scores]),
        keys.TRAIN_COMPLETION_LENGTH: sum(lengths) / len(lengths),
        keys.TRAIN_COMPLETION_LENGTH_MAX: float(max(lengths)),
    }
    if max_token_len is not None:
        cut = [t for group in batch for t in group.truncations(max_token_len)]
        values[keys.TRAIN_TRUNCATED_FRACTION] = sum(cut) / len(cut)
    return values


def without_truncated(group: ScoredDataGroup, max_token_len: int) -> ScoredDataGroup:
    """``group`` with its truncated members' masks all ``MASK_IGNORE`` (weight 0 in the loss). Their scores still
    count in the group's advantages, as TRL's mask_truncated_completions leaves them."""
    cut = group.truncations(max_token_len)
    if not any(cut):
        return group
    masks = [[MASK_IGNORE] * len(m) if c else m for m, c in zip(group.masks, cut, strict=True)]
    return group.model_copy(update={"masks": masks})


def trainable_data(batch: list[ScoredDataGroup]) -> tuple[list[Datum], list[int]]:
    """Datums that carry a learning signal, and the indices of those sent without sampling logprobs."""
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
    return data, missing


def prepare_data(
    backend: TrainingBackend,
    batch: list[ScoredDataGroup],
    trainer: TrainerConfig | None = None,
    max_token_len: int | None = None,
) -> list[Datum]:
    """Datums that carry a learning signal; missing sampling logprobs come from the current policy (on-policy,
    so the importance ratio starts at 1). ``trainer`` adds what its fields ask for (the module doc)."""
    trainer = trainer or TrainerConfig()
    if trainer.mask_truncated_completions and max_token_len is not None:
        batch = [without_truncated(group, max_token_len) for group in batch]
    data, missing = trainable_data(batch)
    if not data:
        return data
    needs_current = trainer.importance_sampling_cap is not None
    if missing or needs_current:
        # One forward for both: the same weights give the on-policy sampling logprobs and the "old" ones.
        asked = list(range(len(data))) if needs_current else missing
        current = dict(zip(asked, backend.forward([data[i] for i in asked]), strict=True))
        for i in missing:
            data[i] = data[i].model_copy(update={"sampling_logprobs_T": current[i]})
        if needs_current:
            data = [d.model_copy(update={"old_logprobs_T": current[i]}) for i, d in enumerate(data)]
    if trainer.beta > 0:
        reference = backend.reference_forward(data)
        data = [d.model_copy(update={"reference_logprobs_T": r}) for d, r in zip(data, reference, strict=True)]
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


def adam_params(trainer: TrainerConfig, learning_rate: float | None = None) -> AdamParams:
    """The step's Adam settings; ``learning_rate``: the schedule's rate of the step (None: ``trainer``'s)."""
    return AdamParams(
        learning_rate=trainer.learning_rate if learning_rate is None else learning_rate,
        weight_decay=trainer.weight_decay,
        max_grad_norm=trainer.max_grad_norm,
    )


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


def throughput(batch: list[ScoredDataGroup], step_seconds: float) -> dict[str, float]:
    sequences = sum(len(g.tokens) for g in batch)
    tokens = sum(len(t) for g in batch for t in g.tokens)
    seconds = max(step_seconds, 1e-9)
    return {
        keys.TRAIN_STEP_SECONDS: step_seconds,
        keys.TRAIN_SEQUENCES_PER_SECOND: sequences / seconds,
        keys.TRAIN_TOKENS_PER_SECOND: tokens / seconds,
    }


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
