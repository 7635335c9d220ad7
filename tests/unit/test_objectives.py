"""The objectives' table is the one place an objective is defined: the config offers and checks its names, the
Tinker route refuses those its server lacks, the loss settings take its default cap, and an objective defined here,
in the test (one definition, registered here), trains end to end through the unchanged loop on a real tiny model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import torch
from pydantic import ValidationError

from hermes_nb.config import BackendName, RunConfig, TrainerConfig
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.objectives import (
    LOCAL,
    OBJECTIVES,
    TINKER,
    Objective,
    Surrogate,
    SurrogateInputs,
    objective_names,
    register_objective,
)
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.testing import make_tiny_model
from hermes_nb.tinker.algorithms import tinker_field_problem
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.loop import LoopSettings, run_training
from hermes_nb.trainer.step.advantages import with_batch_advantages
from hermes_nb.trainer.step.loss_settings import loss_config_for
from hermes_nb.trainer.step.losses import policy_loss_sum
from hermes_nb.trainer.step.preparation import prepare_data

torch.set_num_threads(1)

SERVER = "http://127.0.0.1:8000"


def _reinforce(x: SurrogateInputs) -> Surrogate:
    """``A * logp``: plain REINFORCE, no importance ratio (on-policy its gradient is importance_sampling's)."""
    return Surrogate(x.advantages_BT * x.logprobs_BT)


# The test's objective: its one definition.
REINFORCE = Objective(
    name="test_reinforce",
    summary="REINFORCE without the importance ratio",
    surrogate=_reinforce,
    clips=None,
    backends=frozenset({LOCAL}),
)


@pytest.fixture
def reinforce() -> Iterator[Objective]:
    """``REINFORCE`` registered for one test, and gone after it."""
    register_objective(REINFORCE)
    try:
        yield REINFORCE
    finally:
        del OBJECTIVES[REINFORCE.name]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


# ---- the table and its readers -------------------------------------------------------------------------------


def test_the_configs_choices_are_the_tables_names() -> None:
    schema = TrainerConfig.model_json_schema()["properties"]["loss"]
    assert schema["enum"] == list(OBJECTIVES) == ["importance_sampling", "ppo", "cispo"]
    for name in OBJECTIVES:
        assert TrainerConfig(loss=name).loss == name


def test_an_unknown_objective_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(ValidationError, match="importance_sampling, ppo, cispo"):
        TrainerConfig(loss="sgd")


def test_every_objective_names_only_backends_the_config_has() -> None:
    assert {LOCAL, TINKER} == set(get_args(BackendName))
    for objective in OBJECTIVES.values():
        assert objective.backends <= set(get_args(BackendName)), objective.name


def test_tinker_refuses_exactly_the_objectives_the_table_does_not_give_it() -> None:
    assert objective_names(TINKER) == ("importance_sampling", "ppo")
    for objective in OBJECTIVES.values():
        problem = tinker_field_problem(TrainerConfig(backend="tinker", lora_rank=8, loss=objective.name), SERVER)
        assert (problem is None) == (TINKER in objective.backends), objective.name


def test_a_clip_range_is_refused_beside_an_objective_that_clips_nothing() -> None:
    for objective in OBJECTIVES.values():
        if objective.clips is None:
            with pytest.raises(ValidationError, match="does not clip: use loss ppo or cispo"):
                TrainerConfig(loss=objective.name, epsilon_high=0.3)
        else:
            assert TrainerConfig(loss=objective.name, epsilon_high=0.3).epsilon_high == 0.3


def test_the_default_upper_range_comes_from_the_objective() -> None:
    for objective in OBJECTIVES.values():
        high = loss_config_for(TrainerConfig(loss=objective.name, epsilon=0.1), 8).clip_epsilon_high
        assert high == (objective.default_epsilon_high or 0.1), objective.name


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'ppo' is registered already"):
        register_objective(OBJECTIVES["ppo"])


# ---- an objective defined in the test -------------------------------------------------------------------------


def test_the_tests_objective_is_a_choice_only_once_registered(reinforce: Objective) -> None:
    assert TrainerConfig(loss=reinforce.name).loss == reinforce.name
    assert TrainerConfig.model_json_schema()["properties"]["loss"]["enum"][-1] == reinforce.name
    del OBJECTIVES[reinforce.name]
    try:
        with pytest.raises(ValidationError, match="test_reinforce"):
            TrainerConfig(loss=reinforce.name)
    finally:
        register_objective(reinforce)


def test_the_tests_objective_is_refused_on_tinker(reinforce: Objective) -> None:
    problem = tinker_field_problem(TrainerConfig(backend="tinker", lora_rank=8, loss=reinforce.name), SERVER)
    assert problem is not None and problem.startswith("trainer.loss: 'test_reinforce'")


def test_the_shared_loss_sums_the_tests_surrogate(reinforce: Objective) -> None:
    logp = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.7, -1.1]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    weights = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    sums = policy_loss_sum(reinforce.name, logp, logp.detach() - 0.1, advantages, weights)
    sums.loss.backward()
    assert float(sums.loss.detach()) == pytest.approx(-(1.0 * (-0.5 - 2.0) + -2.0 * (-0.3 - 0.7)))
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, -advantages * weights)
    assert sums.stats.clipped_low == sums.stats.clipped_high == 0.0


def _group(first: int, scores: list[float]) -> ScoredDataGroup:
    tokens = [[first, first + 1, 20 + i, 21 + i] for i in range(len(scores))]
    return ScoredDataGroup(tokens=tokens, masks=[[-100, -100, *t[2:]] for t in tokens], scores=scores)


class ListSource:
    def __init__(self, batches: list[list[ScoredDataGroup]]) -> None:
        self.batches = list(batches)

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        return self.batches.pop(0) if self.batches else None


def _train(model_dir: Path, run_dir: Path, loss: str, steps: int) -> tuple[Any, list[dict[str, float]]]:
    """A real short run of the loop on the local backend; the backend and each step's logged values."""
    trainer = TrainerConfig(base_model=str(model_dir), loss=loss, learning_rate=1e-2)
    config = RunConfig(env={"batch_size": 4, "total_steps": steps}, trainer=trainer)
    backend = LocalBackend(model_dir)
    metrics = MetricsLogger(run_dir / "metrics.jsonl")
    batches = [[_group(5, [1.0, 0.0]), _group(7, [0.2, 0.9])] for _ in range(steps)]
    outcome = run_training(
        backend,
        ListSource(batches),
        LoopSettings.from_config(config, run_dir),
        config,
        stop=threading.Event(),
        metrics=metrics,
    )
    metrics.close()
    assert outcome.reason == "completed" and outcome.last_step == steps
    rows = [json.loads(line)["values"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return backend, rows


def test_on_policy_the_tests_objective_has_importance_samplings_gradient(reinforce: Objective, model_dir: Path) -> None:
    # With the ratio at 1, grad of -A * logp is grad of -A * ratio: the backend computed the test's surrogate (its
    # loss differs: -A * logp against -A).
    batch = [_group(5, [1.0, 0.0]), _group(7, [0.2, 0.9])]
    gradients, losses = [], []
    for loss in (reinforce.name, "importance_sampling"):
        backend = LocalBackend(model_dir)
        data = prepare_data(backend, with_batch_advantages(batch, "group"))
        losses.append(backend.forward_backward(data, loss, loss_config_for(TrainerConfig(), 8)).loss)
        gradients.append({name: p.grad.clone() for name, p in backend.model.named_parameters() if p.grad is not None})
    assert gradients[0].keys() == gradients[1].keys()
    for name, grad in gradients[0].items():
        torch.testing.assert_close(grad, gradients[1][name], rtol=1e-4, atol=1e-6, msg=name)
    assert losses[0] != pytest.approx(losses[1])


def test_the_tests_objective_trains_end_to_end_through_the_loop(
    reinforce: Objective, model_dir: Path, tmp_path: Path
) -> None:
    start = {name: p.detach().clone() for name, p in LocalBackend(model_dir).model.named_parameters()}
    backend, rows = _train(model_dir, tmp_path, reinforce.name, steps=3)
    assert len(rows) == 3 and all(torch.isfinite(torch.tensor(r[keys.TRAIN_LOSS])) for r in rows)
    assert all(r[keys.TRAIN_TRAINED_SEQUENCES] == 4.0 for r in rows)
    assert any(not torch.equal(p, start[name]) for name, p in backend.model.named_parameters())
