"""The training loop's side of the algorithm variants: reward scaling, the learning-rate schedule against
transformers', several optimizer passes per batch, what fills the datums before the first pass, truncated
completions, dynamic sampling and the per-step metrics. Passes and schedules run on a real tiny model; the datum
bookkeeping is read off a small recording backend (the loss itself is tested in test_losses*)."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.env.scoring import build_scored_group
from hermes_nb.env.types import SampledCompletion
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.trajectory import TRUNCATED_OVERRIDE, ScoredDataGroup
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.batches.dynamic_sampling import MAX_PULLS_PER_STEP, DynamicSampling, with_dynamic_sampling
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.loop import LoopSettings, checkpoint_kind, run_training, train_step
from hermes_nb.trainer.step.advantages import normalized_scores, with_batch_advantages
from hermes_nb.trainer.step.schedule import learning_rate_at
from hermes_nb.trainer.types import AdamParams, Datum, ForwardBackwardOutput, LossConfig, OptimStepOutput

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _group(first: int, scores: list[float], length: int = 2, **fields: Any) -> ScoredDataGroup:
    tokens = [[first, first + 1, *[20 + i + k for k in range(length)]] for i in range(len(scores))]
    masks = [[-100, -100, *t[2:]] for t in tokens]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=scores, **fields)


class ListSource:
    def __init__(self, batches: list[list[ScoredDataGroup]]) -> None:
        self.batches, self.served = list(batches), 0

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        if not self.batches:
            return None
        self.served += 1
        return self.batches.pop(0)


class RecordingBackend:
    """Records what the loop hands a backend; logprobs are constants that tell the calls apart."""

    CURRENT, REFERENCE = -1.0, -2.0

    def __init__(self) -> None:
        self.passes: list[list[Datum]] = []
        self.rates: list[float] = []
        self.reference_calls = 0

    def forward(self, data: list[Datum]) -> list[list[float]]:
        return [[self.CURRENT] * len(d.input_tokens_T) for d in data]

    def reference_forward(self, data: list[Datum]) -> list[list[float]]:
        self.reference_calls += 1
        return [[self.REFERENCE] * len(d.input_tokens_T) for d in data]

    def forward_backward(self, data: list[Datum], loss_fn: str, config: LossConfig | None = None) -> Any:
        self.passes.append(data)
        return ForwardBackwardOutput(loss=0.5, num_trained_tokens=sum(d.num_trained_tokens for d in data))

    def optim_step(self, adam: AdamParams) -> OptimStepOutput:
        self.rates.append(adam.learning_rate)
        return OptimStepOutput()


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- reward scaling -------------------------------------------------------------------------------------


def test_batch_scaling_divides_each_groups_centred_scores_by_the_batch_std() -> None:
    batch = [_group(5, [1.0, 0.0]), _group(7, [1.0, 1.0, 0.0, 0.0])]
    scaled = with_batch_advantages(batch, "batch")
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    std = math.sqrt(sum((s - 0.5) ** 2 for s in scores) / len(scores))
    assert scaled[0].advantages is not None
    assert scaled[0].advantages[0][0] == pytest.approx(0.5 / (std + 1e-6))


def test_no_scaling_leaves_the_centred_scores_undivided() -> None:
    scaled = with_batch_advantages([_group(5, [3.0, 1.0])], "none")
    assert scaled[0].advantages == [[1.0] * 4, [-1.0] * 4]


def test_group_scaling_is_todays_advantage_bit_for_bit() -> None:
    batch = [_group(5, [0.3, 0.9, 0.1])]
    assert with_batch_advantages(batch, "group") is batch
    assert normalized_scores([0.3, 0.9, 0.1], std=None) == normalized_scores([0.3, 0.9, 0.1])


# ---- the learning-rate schedule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "hf_name"), [("constant", "constant_with_warmup"), ("linear", "linear"), ("cosine", "cosine")]
)
def test_schedule_equals_transformers_get_scheduler_step_by_step(kind: str, hf_name: str) -> None:
    from transformers import get_scheduler

    total, warmup, rate = 12, 3, 1e-3
    trainer = TrainerConfig(learning_rate=rate, lr_scheduler_type=kind, warmup_steps=warmup)  # type: ignore[arg-type]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=rate)
    scheduler = get_scheduler(hf_name, optimizer, num_warmup_steps=warmup, num_training_steps=total)
    for step in range(1, total + 1):
        # transformers' Trainer: the optimizer step uses the current rate, then the scheduler steps.
        assert learning_rate_at(trainer, step, total) == optimizer.param_groups[0]["lr"], step
        optimizer.step()
        scheduler.step()


def test_each_step_trains_at_the_schedules_rate(model_dir: Path, tmp_path: Path) -> None:
    trainer = TrainerConfig(base_model=str(model_dir), lr_scheduler_type="linear", warmup_steps=2)
    config = RunConfig(env={"batch_size": 2, "total_steps": 5}, trainer=trainer)
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    batches = [[_group(5, [1.0, 0.0])] for _ in range(5)]
    backend = RecordingBackend()
    settings = LoopSettings.from_config(config, tmp_path)
    run_training(
        LocalBackend(model_dir), ListSource(batches), settings, config, stop=threading.Event(), metrics=metrics
    )
    metrics.close()
    logged = [r["values"][keys.TRAIN_LEARNING_RATE] for r in _rows(tmp_path / "metrics.jsonl")]
    assert logged == [learning_rate_at(trainer, s, 5) for s in range(1, 6)]
    assert logged[0] == 0.0 and logged[2] == trainer.learning_rate
    del backend


def test_a_resumed_run_continues_the_schedule_where_it_was(model_dir: Path, tmp_path: Path) -> None:
    trainer = TrainerConfig(base_model=str(model_dir), lr_scheduler_type="cosine", warmup_steps=1)
    config = RunConfig(env={"batch_size": 2, "total_steps": 6}, trainer=trainer)
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    batches = [[_group(5, [1.0, 0.0])] for _ in range(3)]
    settings = LoopSettings.from_config(config, tmp_path)
    run_training(
        LocalBackend(model_dir),
        ListSource(batches),
        settings,
        config,
        stop=threading.Event(),
        metrics=metrics,
        start_step=3,
    )
    metrics.close()
    rows = _rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [4, 5, 6]
    assert [r["values"][keys.TRAIN_LEARNING_RATE] for r in rows] == [learning_rate_at(trainer, s, 6) for s in (4, 5, 6)]


# ---- several optimizer passes per batch ------------------------------------------------------------------


def test_two_iterations_take_two_optimizer_steps_per_batch_against_the_sampling_policy(
    model_dir: Path, tmp_path: Path
) -> None:
    trainer = TrainerConfig(base_model=str(model_dir), num_iterations=2, learning_rate=1e-2, loss="ppo")
    config = RunConfig(env={"batch_size": 2, "total_steps": 3}, trainer=trainer)
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    batches = [[_group(5, [1.0, 0.0])] for _ in range(3)]
    settings = LoopSettings.from_config(config, tmp_path)
    run_training(
        LocalBackend(model_dir), ListSource(batches), settings, config, stop=threading.Event(), metrics=metrics
    )
    metrics.close()
    rows = [r["values"] for r in _rows(tmp_path / "metrics.jsonl")]
    assert [r[keys.TRAIN_OPTIMIZER_STEPS] for r in rows] == [2.0, 4.0, 6.0]
    # The second pass's ratio is against the sampling logprobs (taken before the first pass), so it moved off 1.
    assert all(abs(r["train/ratio_mean"] - 1.0) > 1e-6 for r in rows)


def test_every_pass_trains_on_the_same_datums() -> None:
    backend = RecordingBackend()
    train_step(backend, [_group(5, [1.0, 0.0])], TrainerConfig(num_iterations=3))  # type: ignore[arg-type]
    assert len(backend.passes) == 3 and backend.passes[0] == backend.passes[1] == backend.passes[2]
    assert len(backend.rates) == 3


def test_a_batch_without_signal_counts_no_optimizer_step() -> None:
    backend = RecordingBackend()
    values = train_step(backend, [_group(5, [1.0, 1.0])], TrainerConfig(num_iterations=2), optimizer_steps=4)  # type: ignore[arg-type]
    assert values[keys.TRAIN_OPTIMIZER_STEPS] == 4.0 and not backend.passes


# ---- what fills the datums before the first pass ---------------------------------------------------------


def test_the_mismatch_correction_fills_old_logprobs_from_the_trainers_forward() -> None:
    backend = RecordingBackend()
    sampled = [[1.0, 1.0, -0.5, -0.5]] * 2
    group = _group(5, [1.0, 0.0], inference_logprobs=sampled)
    train_step(backend, [group], TrainerConfig(importance_sampling_cap=2.0))  # type: ignore[arg-type]
    [datum, _] = backend.passes[0]
    assert datum.old_logprobs_T == [RecordingBackend.CURRENT] * 3
    assert datum.sampling_logprobs_T == [1.0, -0.5, -0.5]  # the sampler's stay the sampler's


def test_without_the_correction_no_old_logprobs_are_computed() -> None:
    backend = RecordingBackend()
    train_step(backend, [_group(5, [1.0, 0.0])], TrainerConfig())  # type: ignore[arg-type]
    assert all(d.old_logprobs_T is None and d.reference_logprobs_T is None for d in backend.passes[0])
    assert backend.reference_calls == 0


def test_a_kl_penalty_fills_the_reference_logprobs_once_per_step() -> None:
    backend = RecordingBackend()
    train_step(backend, [_group(5, [1.0, 0.0])], TrainerConfig(beta=0.1, num_iterations=2))  # type: ignore[arg-type]
    assert backend.reference_calls == 1
    assert all(d.reference_logprobs_T == [RecordingBackend.REFERENCE] * 3 for d in backend.passes[1])


# ---- truncated completions ---------------------------------------------------------------------------------


def test_a_completion_cut_at_its_token_budget_is_marked_truncated() -> None:
    def completion(text: str, finish: str) -> SampledCompletion:
        return SampledCompletion(text=text, prompt_token_ids=[1], token_ids=[5, 6], logprobs=None, finish_reason=finish)

    group = build_scored_group([completion("a", "stop"), completion("b", "length")], [1.0, 0.0])
    assert group is not None and group.overrides == [{}, {TRUNCATED_OVERRIDE: True}]
    assert group.truncations(max_token_len=64) == [False, True]


def test_a_sequence_that_fills_max_token_length_counts_as_truncated() -> None:
    assert _group(5, [1.0, 0.0], length=2).truncations(max_token_len=4) == [True, True]
    assert _group(5, [1.0, 0.0], length=2).truncations(max_token_len=5) == [False, False]


def test_masking_truncated_completions_leaves_them_out_of_the_loss() -> None:
    group = _group(5, [1.0, 0.0, 0.2], overrides=[{}, {TRUNCATED_OVERRIDE: True}, {}])
    backend = RecordingBackend()
    values = train_step(backend, [group], TrainerConfig(mask_truncated_completions=True), 64)  # type: ignore[arg-type]
    trained = backend.passes[0]
    assert len(trained) == 2
    # The truncated member's score still counts in the group's mean and std, as in TRL.
    assert [d.advantages_T[-1] for d in trained] == pytest.approx(
        [a for i, a in enumerate(normalized_scores([1.0, 0.0, 0.2])) if i != 1]
    )
    assert values[keys.TRAIN_TRUNCATED_FRACTION] == pytest.approx(1 / 3)


def test_truncated_completions_are_trained_on_by_default() -> None:
    group = _group(5, [1.0, 0.0], overrides=[{}, {TRUNCATED_OVERRIDE: True}])
    backend = RecordingBackend()
    train_step(backend, [group], TrainerConfig(), 64)  # type: ignore[arg-type]
    assert len(backend.passes[0]) == 2


# ---- per-step metrics -------------------------------------------------------------------------------------


def test_a_step_reports_reward_spread_and_completion_lengths() -> None:
    batch = [_group(5, [1.0, 0.0], length=2), _group(7, [1.0, 1.0], length=4)]
    values = train_step(RecordingBackend(), batch, TrainerConfig(), 64)  # type: ignore[arg-type]
    assert values[keys.TRAIN_REWARD_STD] == pytest.approx(math.sqrt(3 / 16))
    assert values[keys.TRAIN_COMPLETION_LENGTH] == 3.0
    assert values[keys.TRAIN_COMPLETION_LENGTH_MAX] == 4.0
    assert values[keys.TRAIN_TRUNCATED_FRACTION] == 0.0
    assert values[keys.TRAIN_OPTIMIZER_STEPS] == 1.0


# ---- dynamic sampling -------------------------------------------------------------------------------------


def test_dynamic_sampling_drops_groups_without_signal_and_pulls_until_the_batch_is_full() -> None:
    api = ListSource([[_group(5, [1.0, 0.0]), _group(7, [1.0, 1.0])], [_group(9, [0.0, 0.0]), _group(11, [0.0, 1.0])]])
    source = DynamicSampling(api, batch_size=4, total_steps=10)
    batch = source.next_batch(threading.Event())
    assert batch is not None and [g.tokens[0][0] for g in batch] == [5, 11]
    assert source.batches_taken() == 2
    assert source.batch_metrics()[keys.TRAIN_GROUPS_DROPPED] == 2.0


def test_dynamic_sampling_on_a_task_without_signal_gives_up_after_its_bound() -> None:
    api = ListSource([[_group(5, [0.0, 0.0])] for _ in range(MAX_PULLS_PER_STEP + 3)])
    source = DynamicSampling(api, batch_size=2, total_steps=100)
    batch = source.next_batch(threading.Event())
    assert api.served == MAX_PULLS_PER_STEP
    assert batch is not None and batch[0].scores == [0.0, 0.0]  # trained on nothing: no optimizer step


def test_dynamic_sampling_never_pulls_past_the_runs_last_step() -> None:
    api = ListSource([[_group(5, [0.0, 0.0])] for _ in range(5)])
    source = DynamicSampling(api, batch_size=2, total_steps=3, start_step=1)
    source.next_batch(threading.Event())
    assert api.served == 2 and source.batches_taken() == 2


@dataclass(frozen=True)
class Bounds:
    """A run's bounds as dynamic sampling reads them (``RunBounds``), without the loop's settings."""

    batch_size: int
    total_steps: int
    trainer: TrainerConfig


def test_dynamic_sampling_wraps_the_source_only_when_the_trainer_asks_for_it() -> None:
    api = ListSource([[_group(5, [1.0, 0.0])]])
    assert with_dynamic_sampling(api, Bounds(2, 10, TrainerConfig()), start_step=0) is api
    wrapped = with_dynamic_sampling(api, Bounds(2, 10, TrainerConfig(dynamic_sampling=True)), start_step=0)
    assert isinstance(wrapped, DynamicSampling)


def test_the_loop_counts_every_pulled_batch_as_a_step_of_the_run(model_dir: Path, tmp_path: Path) -> None:
    trainer = TrainerConfig(base_model=str(model_dir), dynamic_sampling=True, save_checkpoint_interval=2)
    config = RunConfig(env={"batch_size": 2, "total_steps": 4}, trainer=trainer)
    settings = LoopSettings.from_config(config, tmp_path)
    api = ListSource(
        [[_group(5, [1.0, 1.0])], [_group(5, [1.0, 0.0])], [_group(5, [1.0, 0.0])], [_group(5, [0.0, 1.0])]]
    )
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    source = DynamicSampling(api, settings.batch_size, settings.total_steps)
    outcome = run_training(LocalBackend(model_dir), source, settings, config, stop=threading.Event(), metrics=metrics)
    metrics.close()
    rows = _rows(tmp_path / "metrics.jsonl")
    assert (outcome.reason, outcome.last_step) == ("completed", 4)
    assert [(r["step"], r["values"][keys.TRAIN_GROUPS_DROPPED]) for r in rows] == [(2, 1.0), (3, 0.0), (4, 0.0)]


def test_an_interval_checkpoint_is_due_when_a_step_jumps_over_its_multiple(tmp_path: Path) -> None:
    config = RunConfig(env={"total_steps": 10}, trainer=TrainerConfig(save_checkpoint_interval=3))
    settings = LoopSettings.from_config(config, tmp_path)
    assert checkpoint_kind(4, settings, previous=2) == "interval"
    assert checkpoint_kind(5, settings, previous=4) is None
    assert checkpoint_kind(6, settings) == "interval"
