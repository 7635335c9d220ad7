"""The memory model predicts a run's memory from its config alone, and a real step stays within 25% of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from architectures import make_model

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.trainer.local.memory_model import StepShape, estimate, estimate_run, model_sizes

UNIT_DIR = Path(__file__).resolve().parent
# Qwen3-0.6B's widths and vocabulary (its config.json), with 2 of its 28 layers so a CPU step takes seconds.
QWEN3_06B = {
    "vocab_size": 151_936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 4096,
    "num_hidden_layers": 2,
}
SEQUENCES, TOKENS = 4, 64


@pytest.fixture(scope="module")
def qwen3_06b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("qwen3_06b"), "qwen3", **QWEN3_06B)


def test_the_module_imports_without_torch() -> None:
    code = "import sys, hermes_nb.trainer.local.memory_model; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_the_parameter_count_is_the_models(qwen3_06b: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(qwen3_06b))
    assert model_sizes(qwen3_06b).parameters() == sum(p.numel() for p in model.parameters())


def test_a_lora_run_trains_and_stores_less(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "qwen3", "qwen3")
    full = estimate_run(RunConfig(trainer=TrainerConfig(base_model=str(model_dir))))
    lora = estimate_run(RunConfig(trainer=TrainerConfig(base_model=str(model_dir), lora_rank=4, dtype="bfloat16")))
    assert 0 < lora.trained_parameters < full.trained_parameters == full.parameters
    assert lora.optimizer < full.optimizer and lora.weights < full.weights and lora.embedding_gradients == 0


def test_checkpointing_keeps_fewer_activations(tmp_path: Path) -> None:
    sizes = model_sizes(make_model(tmp_path / "llama", "llama", num_hidden_layers=8))
    plain = estimate(sizes, StepShape(sequences=16, sequence_tokens=512))
    checkpointed = estimate(sizes, StepShape(sequences=16, sequence_tokens=512, gradient_checkpointing=True))
    assert checkpointed.activations < plain.activations / 2


def test_vllm_takes_its_share_of_the_gpu(tmp_path: Path) -> None:
    sizes = model_sizes(make_model(tmp_path / "qwen2", "qwen2"))
    shape = StepShape(sequences=8, sequence_tokens=256, device="cuda", sampler="vllm", gpu_bytes=80 << 30)
    assert estimate(sizes, shape).kv_cache == int(0.4 * (80 << 30))


@pytest.mark.slow
def test_a_qwen3_06b_shaped_step_peaks_within_25_percent_of_the_prediction(qwen3_06b: Path) -> None:
    # The step's resident-memory growth in a process of its own (memory_probe.py says why resident memory).
    probe = [sys.executable, str(UNIT_DIR / "memory_probe.py"), str(qwen3_06b), str(SEQUENCES), str(TOKENS)]
    out = subprocess.run(probe, capture_output=True, text=True, check=True, env=os.environ)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    growth = measured["peak"] - measured["before"]
    predicted = estimate(model_sizes(qwen3_06b), StepShape(sequences=SEQUENCES, sequence_tokens=TOKENS)).trainer_peak
    assert abs(growth - predicted) <= 0.25 * predicted, (
        f"measured {growth / 2**20:.0f} MiB, predicted {predicted / 2**20:.0f}"
    )
