"""The algorithm fields a run on Tinker cannot honour are refused before it starts, naming the field and the
server; the KL penalty it can take is folded into the advantages. The decision is made from the config alone
(SkyRL 0.3.0 reports its models, not its losses), so these tests need no server: the preflight child refuses before
it connects, which the closed port below shows."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_nb.config import RunConfig, TinkerConfig, TrainerConfig
from hermes_nb.errors import TinkerError
from hermes_nb.system.net import free_port
from hermes_nb.tinker.algorithms import tinker_field_problem
from hermes_nb.tinker.datums import aligned_reference_logprobs, mean_sampled_kl, reference_prompt, with_kl_penalty
from hermes_nb.tinker.preflight import check_before_start
from hermes_nb.trainer.types import Datum

SERVER = "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"loss": "cispo"}, "trainer.loss"),
        ({"loss_type": "grpo"}, "trainer.loss_type"),
        ({"loss_type": "dr_grpo"}, "trainer.loss_type"),
        ({"importance_sampling_level": "sequence"}, "trainer.importance_sampling_level"),
        ({"importance_sampling_cap": 2.0}, "trainer.importance_sampling_cap"),
        ({"beta": 0.01}, "trainer.kl_estimator"),  # the default k3; Tinker's penalty is k1's
        ({"beta": 0.01, "kl_estimator": "k1", "reference_model": "/some/model"}, "trainer.reference_model"),
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
        beta=0.04,
        kl_estimator="k1",
    )
    assert tinker_field_problem(trainer, SERVER) is None


def test_the_preflight_refuses_before_it_reaches_any_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a refusal naming a field came before any connection
    config = RunConfig(
        trainer=TrainerConfig(backend="tinker", lora_rank=8, beta=0.1), tinker=TinkerConfig(base_url=url)
    )
    with pytest.raises(TinkerError, match=rf"^trainer.kl_estimator: .*{url}"):
        check_before_start(config)


def datum(sampling: list[float], reference: list[float], advantages: list[float], weights: list[float]) -> Datum:
    size = len(sampling)
    return Datum(
        input_tokens_T=list(range(size)),
        target_tokens_T=list(range(1, size + 1)),
        weights_T=weights,
        sampling_logprobs_T=sampling,
        advantages_T=advantages,
        reference_logprobs_T=reference,
    )


def test_the_kl_penalty_is_folded_into_the_advantages_centred_on_the_batch_mean() -> None:
    # kl per trained token: 0.5 and -0.1 (first datum), 0.2 (second); the prompt position is not trained.
    data = [
        datum([-1.0, -0.5, -2.0], [-1.0, -1.0, -1.9], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]),
        datum([-0.3, -0.8], [-0.3, -1.0], [-1.0, -1.0], [0.0, 1.0]),
    ]
    mean = (0.5 - 0.1 + 0.2) / 3
    assert mean_sampled_kl(data) == pytest.approx(mean)

    shaped = with_kl_penalty(data, beta=0.5)

    assert shaped[0].advantages_T == pytest.approx([1.0, 1.0 + 0.5 * (mean - 0.5), 1.0 + 0.5 * (mean + 0.1)])
    assert shaped[1].advantages_T == pytest.approx([-1.0, -1.0 + 0.5 * (mean - 0.2)])
    trained = [(a, w) for d in shaped for a, w in zip(d.advantages_T, d.weights_T, strict=True) if w > 0]
    before = [(a, w) for d in data for a, w in zip(d.advantages_T, d.weights_T, strict=True) if w > 0]
    assert sum(a for a, _ in trained) == pytest.approx(sum(a for a, _ in before))  # centred: the mean stays


def test_the_references_logprobs_line_up_with_the_targets() -> None:
    one = datum([-1.0, -1.0, -1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0])
    assert reference_prompt(one) == [0, 1, 2, 3]
    assert aligned_reference_logprobs(one, [None, -0.1, -0.2, -0.3]) == [-0.1, -0.2, -0.3]  # the SDK's shape
    assert aligned_reference_logprobs(one, [-0.1, -0.2, -0.3]) == [-0.1, -0.2, -0.3]  # SkyRL 0.3.0's
    with pytest.raises(ValueError, match="returned 2 values for a sequence of 4 tokens"):
        aligned_reference_logprobs(one, [-0.1, -0.2])
