"""vLLM's memory fields (``trainer.vllm_gpu_memory_utilization``, ``trainer.vllm_sleep_mode``): typed and described,
out-of-range values and sleep mode where it cannot work are refused naming the field, and a refused assignment
changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hermes_nb.config import RunConfig, TrainerConfig


def test_the_memory_share_defaults_to_04_and_both_fields_are_described() -> None:
    assert TrainerConfig().vllm_gpu_memory_utilization == 0.4
    assert TrainerConfig().vllm_sleep_mode is False
    for name in ("vllm_gpu_memory_utilization", "vllm_sleep_mode"):
        assert TrainerConfig.model_fields[name].description, name


@pytest.mark.parametrize("share", [0.0, -0.1, 1.01, 2])
def test_a_memory_share_outside_0_to_1_is_refused_naming_the_field(share: float) -> None:
    with pytest.raises(ValidationError) as info:
        RunConfig.model_validate({"trainer": {"vllm_gpu_memory_utilization": share}})
    assert "vllm_gpu_memory_utilization" in str(info.value)


def test_a_whole_gpu_is_a_valid_share() -> None:
    assert TrainerConfig(vllm_gpu_memory_utilization=1.0).vllm_gpu_memory_utilization == 1.0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"vllm_sleep_mode": True, "device": "cpu"}, ("trainer.vllm_sleep_mode", "trainer.device is cpu")),
        ({"vllm_sleep_mode": True, "sampler": "native"}, ("trainer.vllm_sleep_mode", "trainer.sampler: native")),
    ],
)
def test_sleep_mode_where_it_cannot_work_is_refused_naming_the_fields(
    fields: dict[str, Any], named: tuple[str, str]
) -> None:
    with pytest.raises(ValidationError) as info:
        TrainerConfig.model_validate(fields)
    assert all(name in str(info.value) for name in named), str(info.value)


def test_sleep_mode_on_a_device_that_may_be_cuda_is_accepted() -> None:
    for device in ("auto", "cuda", "cuda:1"):
        assert TrainerConfig(vllm_sleep_mode=True, sampler="vllm", device=device).vllm_sleep_mode


def test_a_refused_assignment_leaves_the_config_as_it_was() -> None:
    trainer = TrainerConfig(device="cpu")
    with pytest.raises(ValidationError, match="trainer.vllm_sleep_mode"):
        trainer.vllm_sleep_mode = True
    assert (trainer.vllm_sleep_mode, trainer.device) == (False, "cpu")

    sleeping = TrainerConfig(vllm_sleep_mode=True, sampler="vllm")
    with pytest.raises(ValidationError, match="trainer.vllm_sleep_mode"):
        sleeping.device = "cpu"
    with pytest.raises(ValidationError, match="trainer.vllm_sleep_mode"):
        sleeping.sampler = "native"
    with pytest.raises(ValidationError, match="vllm_gpu_memory_utilization"):
        sleeping.vllm_gpu_memory_utilization = 0
    assert (sleeping.device, sleeping.sampler, sleeping.vllm_gpu_memory_utilization) == ("auto", "vllm", 0.4)
