"""The algorithm fields a run on Tinker cannot honour are refused before it starts, naming the field and the
server. The decision is made from the config alone (SkyRL 0.3.0 reports its models, not its losses), so these
tests need no server: the preflight child refuses before it connects, which the closed port below shows."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_nb.config import RunConfig, TinkerConfig, TrainerConfig
from hermes_nb.errors import TinkerError
from hermes_nb.system.net import free_port
from hermes_nb.tinker.algorithms import tinker_field_problem
from hermes_nb.tinker.preflight import check_before_start

SERVER = "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"loss": "cispo"}, "trainer.loss"),
        ({"loss_type": "grpo"}, "trainer.loss_type"),
        ({"loss_type": "dr_grpo"}, "trainer.loss_type"),
        ({"importance_sampling_level": "sequence"}, "trainer.importance_sampling_level"),
        ({"importance_sampling_cap": 2.0}, "trainer.importance_sampling_cap"),
        ({"beta": 0.01}, "trainer.beta"),
    ],
)
def test_a_field_the_server_cannot_honour_is_refused_naming_it_and_the_server(
    fields: dict[str, Any], named: str
) -> None:
    problem = tinker_field_problem(TrainerConfig(backend="tinker", lora_rank=8, **fields), SERVER)
    assert problem is not None and problem.startswith(named) and SERVER in problem


def test_what_the_loop_does_itself_runs_on_tinker() -> None:
    trainer = TrainerConfig(
        backend="tinker",
        lora_rank=8,
        loss="ppo",
        epsilon_high=0.28,
        num_iterations=2,
        scale_rewards="none",
        mask_truncated_completions=True,
        dynamic_sampling=True,
        lr_scheduler_type="cosine",
        warmup_steps=2,
    )
    assert tinker_field_problem(trainer, SERVER) is None


def test_the_preflight_refuses_before_it_reaches_any_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a refusal naming beta came before any connection
    config = RunConfig(
        trainer=TrainerConfig(backend="tinker", lora_rank=8, beta=0.1), tinker=TinkerConfig(base_url=url)
    )
    with pytest.raises(TinkerError, match=rf"^trainer.beta: .*{url}"):
        check_before_start(config)
