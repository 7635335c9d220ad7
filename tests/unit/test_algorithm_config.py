"""The RL algorithm's trainer fields: each is a documented field, fields that mean nothing together are refused
naming both, and they reach the loss settings as the loss reads them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hermes_nb.config import ALGORITHM_FIELDS, TrainerConfig
from hermes_nb.objectives import CISPO
from hermes_nb.trainer.step.loss_settings import loss_config_for


def test_every_algorithm_field_is_a_described_trainer_field() -> None:
    for name in ALGORITHM_FIELDS:
        assert name in TrainerConfig.model_fields, name
        assert TrainerConfig.model_fields[name].description, name


def test_the_default_trains_as_before() -> None:
    loss = loss_config_for(TrainerConfig(), max_completion_length=64)
    assert (loss.clip_epsilon_low, loss.clip_epsilon_high, loss.loss_type, loss.beta) == (0.2, 0.2, "dapo", 0.0)
    assert (loss.importance_sampling_level, loss.importance_sampling_cap, loss.max_completion_length) == (
        "token",
        None,
        64,
    )


def test_clip_higher_and_cispo_caps_reach_the_loss() -> None:
    assert loss_config_for(TrainerConfig(loss="ppo", epsilon_high=0.28), 64).clip_epsilon_high == 0.28
    assert loss_config_for(TrainerConfig(loss="cispo"), 64).clip_epsilon_high == CISPO.default_epsilon_high == 5.0
    assert loss_config_for(TrainerConfig(loss="ppo", epsilon=0.1), 64).clip_epsilon_high == 0.1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"epsilon_high": 0.28}, ("trainer.epsilon_high", "trainer.loss")),
        ({"loss": "importance_sampling", "epsilon_high": 0.3}, ("trainer.epsilon_high", "importance_sampling")),
        ({"reference_model": "some-run"}, ("trainer.reference_model", "trainer.beta")),
    ],
)
def test_fields_that_mean_nothing_together_are_refused_naming_both(
    fields: dict[str, object], named: tuple[str, str]
) -> None:
    with pytest.raises(ValidationError) as info:
        TrainerConfig.model_validate(fields)
    assert all(name in str(info.value) for name in named)


def test_a_refused_assignment_leaves_the_config_as_it_was() -> None:
    trainer = TrainerConfig(loss="ppo", epsilon_high=0.28)
    with pytest.raises(ValidationError):
        trainer.loss = "importance_sampling"
    assert (trainer.loss, trainer.epsilon_high) == ("ppo", 0.28)
