"""rl_test_inference ranks a model trained on the task above the base model it was trained from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from run_helpers import REPO_ROOT, run

from hermes_nb.api import rl_select_environment, rl_test_inference
from hermes_nb.system import home

pytestmark = pytest.mark.e2e

FINE_TUNE_STEPS = 120
FINE_TUNE_LR = 2e-3


def _arithmetic_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_arith_for_test", REPO_ROOT / "environments" / "arithmetic.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the config's annotations through the module
    spec.loader.exec_module(module)
    return module


def fine_tune_on_addition(out: Path, steps: int = FINE_TUNE_STEPS, lr: float = FINE_TUNE_LR, seed: int = 0) -> Path:
    """Teacher-forced training on training items only: a cheap, reliable way to a better checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    arithmetic = _arithmetic_module()
    env = arithmetic.ArithmeticEnv(arithmetic.ArithmeticConfig(seed=seed))  # its training items, from its own RNG
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(home.embedded_base_model_dir())
    model = AutoModelForCausalLM.from_pretrained(home.embedded_base_model_dir())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    eos = tokenizer.eos_token_id
    for _ in range(steps):
        items = [env.train_item() for _ in range(64)]
        sequences = [[*tokenizer.encode(i.prompt + i.answer, add_special_tokens=False), eos] for i in items]
        width = max(len(s) for s in sequences)
        ids = torch.tensor([s + [eos] * (width - len(s)) for s in sequences])  # [batch, width]
        labels = torch.tensor([s + [-100] * (width - len(s)) for s in sequences])  # padding not trained
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_a_model_trained_on_the_task_ranks_above_the_base_model(tmp_path: Path) -> None:
    trained = fine_tune_on_addition(tmp_path / "trained")
    run(rl_select_environment("arithmetic"))

    result = run(rl_test_inference(num_steps=6, group_size=16, models=["embedded", str(trained)]))

    by_model = {r.model: r for r in result.results}
    assert result.environment_works
    assert result.models_succeeded == 2
    assert result.best_model == str(trained)
    assert by_model[str(trained)].accuracy > by_model["embedded"].accuracy
